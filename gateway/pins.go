package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/internal/termsafe"
	"github.com/noeta-go/noeta/webui"
)

// Pin is the definition of an upstream tool as first seen, or as an
// operator last accepted it (docs/adr/0091). A definition that differs is
// Pending, refused until accepted.
type Pin struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Def is the pinned definition; Pending the one the server offers now,
	// when it differs.
	Def     Definition  `json:"def"`
	Pending *Definition `json:"pending,omitempty"`
	// PinnedAt and PinnedBy say when and by whom Def was pinned ("first
	// seen" for the definition seen first).
	PinnedAt time.Time `json:"pinned_at"`
	PinnedBy string    `json:"pinned_by"`
}

// Definition is what a tool's meaning is pinned by: its name, description
// and input schema, and their sha256.
type Definition struct {
	SHA256      string          `json:"sha256"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	SeenAt      time.Time       `json:"seen_at"`
}

// definition hashes a registry spec of an MCP tool: sha256 over the
// canonical JSON of its name (as the server calls it), description and
// input schema.
func definition(remote string, spec noeta.ToolSpec, now time.Time) (Definition, error) {
	schema := spec.InputSchema
	if len(schema) == 0 {
		schema = json.RawMessage("null")
	}
	raw, err := json.Marshal(struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}{remote, spec.Description, schema})
	if err != nil {
		return Definition{}, err
	}
	canon, err := noeta.CanonicalizeJSON(raw)
	if err != nil {
		return Definition{}, err
	}
	sum := sha256.Sum256(canon)
	return Definition{SHA256: hex.EncodeToString(sum[:]), Description: spec.Description, InputSchema: spec.InputSchema, SeenAt: now.UTC()}, nil
}

// splitTool splits a registry name mcp__<server>__<tool>.
func splitTool(name string) (server, tool string, ok bool) {
	rest, ok := strings.CutPrefix(name, "mcp__")
	if !ok {
		return "", "", false
	}
	return strings.Cut(rest, "__")
}

// Pins keeps the pins in a JetStream key-value bucket, <prefix>_tool_pins,
// shared by every gateway and engine of the deployment.
type Pins struct {
	kv jetstream.KeyValue
}

// PinBucket is the name of the pins' bucket under prefix.
func PinBucket(prefix string) string { return prefix + "_tool_pins" }

// OpenPins opens (or creates) the pins' bucket on nc.
func OpenPins(ctx context.Context, nc *nats.Conn, prefix string, replicas int) (*Pins, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("gateway: pins: %w", err)
	}
	if replicas < 1 {
		replicas = 1
	}
	kv, err := js.KeyValue(ctx, PinBucket(prefix))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: PinBucket(prefix), Description: "noeta gateway: the pinned definitions of the upstream MCP tools", History: 5, Storage: jetstream.FileStorage, Replicas: replicas})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, PinBucket(prefix))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: pins bucket %s: %w", PinBucket(prefix), err)
	}
	return &Pins{kv: kv}, nil
}

// pinKey is a pin's key: the server and the tool, each base64url, since a
// tool's name may hold characters a key may not.
func pinKey(server, tool string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(server)) + "." + enc.EncodeToString([]byte(tool))
}

// maxPinBytes bounds a pin's value (two definitions).
const maxPinBytes = 512 << 10

func (p *Pins) get(ctx context.Context, server, tool string) (Pin, uint64, bool, error) {
	e, err := p.kv.Get(ctx, pinKey(server, tool))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Pin{}, 0, false, nil
	}
	if err != nil {
		return Pin{}, 0, false, fmt.Errorf("gateway: reading the pin of %s/%s: %w", server, tool, err)
	}
	if len(e.Value()) > maxPinBytes {
		return Pin{}, 0, false, fmt.Errorf("gateway: the pin of %s/%s is %d bytes, over %d", server, tool, len(e.Value()), maxPinBytes)
	}
	var pin Pin
	if err := json.Unmarshal(e.Value(), &pin); err != nil {
		return Pin{}, 0, false, fmt.Errorf("gateway: the pin of %s/%s: %w", server, tool, err)
	}
	return pin, e.Revision(), true, nil
}

// Check compares a tool's definition with its pin: a tool seen first is
// pinned now (ok); the pinned definition is ok; another is noted as
// pending and refused, with a reason naming what changed.
func (p *Pins) Check(ctx context.Context, server, tool string, def Definition) (ok bool, reason string, err error) {
	for range 3 {
		pin, rev, found, err := p.get(ctx, server, tool)
		if err != nil {
			return false, "", err
		}
		if !found {
			pin = Pin{Server: server, Tool: tool, Def: def, PinnedAt: def.SeenAt, PinnedBy: "first seen"}
			b, err := json.Marshal(pin)
			if err != nil {
				return false, "", err
			}
			if _, err := p.kv.Create(ctx, pinKey(server, tool), b); errors.Is(err, jetstream.ErrKeyExists) {
				continue // another process pinned it first: compare with that
			} else if err != nil {
				return false, "", fmt.Errorf("gateway: pinning %s/%s: %w", server, tool, err)
			}
			return true, "", nil
		}
		if pin.Def.SHA256 == def.SHA256 {
			return true, "", nil
		}
		reason = changeReason(server, tool, pin.Def, def)
		if pin.Pending != nil && pin.Pending.SHA256 == def.SHA256 {
			return false, reason, nil
		}
		pin.Pending = &def
		b, err := json.Marshal(pin)
		if err != nil {
			return false, "", err
		}
		if _, err := p.kv.Update(ctx, pinKey(server, tool), b, rev); err != nil {
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // changed meanwhile: read it again
			}
			return false, "", fmt.Errorf("gateway: noting the change of %s/%s: %w", server, tool, err)
		}
		return false, reason, nil
	}
	return false, "", fmt.Errorf("gateway: the pin of %s/%s kept changing while it was checked", server, tool)
}

func changeReason(server, tool string, was, now Definition) string {
	var what []string
	if was.Description != now.Description {
		what = append(what, "description")
	}
	if string(was.InputSchema) != string(now.InputSchema) {
		what = append(what, "input schema")
	}
	if len(what) == 0 {
		what = append(what, "definition")
	}
	return fmt.Sprintf("the %s of tool %q of MCP server %q changed since it was pinned (sha256 %.12s… now %.12s…); refused until an operator accepts it: engine gateway pin accept %s %s",
		strings.Join(what, " and "), tool, server, was.SHA256, now.SHA256, server, tool)
}

// Accept pins the pending definition of server's tool, by who. Without
// a pending change it is an error saying so.
func (p *Pins) Accept(ctx context.Context, server, tool, who string, now time.Time) error {
	pin, rev, found, err := p.get(ctx, server, tool)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("gateway: no pin of tool %q of server %q (a tool is pinned when a gateway first sees it)", tool, server)
	}
	if pin.Pending == nil {
		return fmt.Errorf("gateway: tool %q of server %q has no changed definition to accept (pinned %s)", tool, server, pin.Def.SHA256)
	}
	pin.Def, pin.Pending, pin.PinnedAt, pin.PinnedBy = *pin.Pending, nil, now.UTC(), who
	b, err := json.Marshal(pin)
	if err != nil {
		return err
	}
	if _, err := p.kv.Update(ctx, pinKey(server, tool), b, rev); err != nil {
		return fmt.Errorf("gateway: accepting %s/%s: %w", server, tool, err)
	}
	return nil
}

// List returns every pin, by server and tool.
func (p *Pins) List(ctx context.Context) ([]Pin, error) {
	keys, err := p.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("gateway: listing pins: %w", err)
	}
	defer func() { _ = keys.Stop() }()
	var out []Pin
	for k := range keys.Keys() {
		a, b, ok := strings.Cut(k, ".")
		if !ok {
			continue
		}
		server, err1 := base64.RawURLEncoding.DecodeString(a)
		tool, err2 := base64.RawURLEncoding.DecodeString(b)
		if err1 != nil || err2 != nil {
			continue
		}
		pin, _, found, err := p.get(ctx, string(server), string(tool))
		if err != nil {
			return nil, err
		}
		if found {
			out = append(out, pin)
		}
	}
	slices.SortFunc(out, func(x, y Pin) int {
		return strings.Compare(x.Server+"\x00"+x.Tool, y.Server+"\x00"+y.Tool)
	})
	return out, nil
}

// PinGuardName names the pin guard in denials.
const PinGuardName = "tool_pins"

// Guard is the gateway's pin guard, for host.Options.Guards: it refuses a
// call to an MCP tool whose definition is not the one pinned, recorded as
// every denial (ToolCallDenied, guard tool_pins). Until the gateway is
// attached with its pins it allows everything (no task runs before).
func (g *Gateway) Guard() guards.Guard { return pinGuard{g} }

type pinGuard struct{ g *Gateway }

func (pinGuard) Name() string  { return PinGuardName }
func (pinGuard) Priority() int { return guards.MinUserPriority }

func (pg pinGuard) Check(ctx context.Context, a noeta.ProposedAction, _ *guards.Context) (noeta.VerdictResult, error) {
	pc, ok := a.(noeta.ProposedToolCall)
	if !ok {
		return noeta.Allow(), nil
	}
	ok, reason, err := pg.g.checkPin(ctx, pc.Call.Tool)
	if err != nil {
		return noeta.VerdictResult{}, err
	}
	if !ok {
		return noeta.Deny(reason), nil
	}
	return noeta.Allow(), nil
}

// checkPin checks the registry's definition of tool against its pin.
func (g *Gateway) checkPin(ctx context.Context, name string) (bool, string, error) {
	server, tool, ok := splitTool(name)
	if !ok {
		return true, "", nil
	}
	g.mu.Lock()
	pins, h := g.pins, g.h
	g.mu.Unlock()
	if pins == nil || h == nil {
		return true, "", nil
	}
	spec, ok := h.Tools().Spec(name)
	if !ok {
		return true, "", nil // unknown: the engine refuses it
	}
	def, err := definition(tool, spec, time.Now())
	if err != nil {
		return false, "", err
	}
	return pins.Check(ctx, server, tool, def)
}

// pinned returns the pinned definition of a tool whose definition changed.
func (g *Gateway) pinned(ctx context.Context, name string) (Definition, bool) {
	server, tool, ok := splitTool(name)
	g.mu.Lock()
	pins := g.pins
	g.mu.Unlock()
	if !ok || pins == nil {
		return Definition{}, false
	}
	pin, _, found, err := pins.get(ctx, server, tool)
	if err != nil || !found {
		return Definition{}, false
	}
	return pin.Def, true
}

// PrintPins writes the pins as a table, or as JSON lines, to w.
func PrintPins(ctx context.Context, p *Pins, w io.Writer, asJSON bool) error {
	pins, err := p.List(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		for _, pin := range pins {
			if err := enc.Encode(pin); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tTOOL\tSHA256\tPINNED BY\tCHANGED")
	for _, pin := range pins {
		changed := "-"
		if pin.Pending != nil {
			changed = "refused until accepted: " + pin.Pending.SHA256[:12] + "…"
		}
		l := termsafe.Line
		fmt.Fprintf(tw, "%s\t%s\t%.12s…\t%s\t%s\n", l(pin.Server), l(pin.Tool), l(pin.Def.SHA256), l(pin.PinnedBy), changed)
	}
	return tw.Flush()
}

// PinsToReview returns the pins whose tool's definition changed upstream
// and waits for an operator (engine approvals shows them beside the
// requests). It reads the deployment's bucket if there is one and creates
// nothing: no bucket, no pins.
func PinsToReview(ctx context.Context, nc *nats.Conn, prefix string) ([]Pin, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("gateway: pins: %w", err)
	}
	kv, err := js.KeyValue(ctx, PinBucket(prefix))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: pins bucket %s: %w", PinBucket(prefix), err)
	}
	all, err := (&Pins{kv: kv}).List(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(p Pin) bool { return p.Pending == nil }), nil
}

// PinReview is a pin to review as engine approvals --json prints it.
type PinReview struct {
	Kind    string    `json:"kind"` // "tool_pin"
	Server  string    `json:"server"`
	Tool    string    `json:"tool"`
	Pinned  string    `json:"pinned_sha256"`
	Pending string    `json:"pending_sha256"`
	SeenAt  time.Time `json:"seen_at"`
	Accept  string    `json:"accept"`
}

// WritePinsToReview prints pins (from PinsToReview): a table, or with
// asJSON a PinReview per line.
func WritePinsToReview(w io.Writer, pins []Pin, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, p := range pins {
			if err := enc.Encode(PinReview{Kind: "tool_pin", Server: p.Server, Tool: p.Tool, Pinned: p.Def.SHA256, Pending: p.Pending.SHA256,
				SeenAt: p.Pending.SeenAt, Accept: acceptCommand(p)}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(pins) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%d tool definition(s) changed upstream, refused until an operator accepts:\n", len(pins))
	for _, p := range pins {
		fmt.Fprintln(w, termsafe.Line(fmt.Sprintf("  mcp__%s__%s  pinned %.12s…  now %.12s… (seen %s)  accept: %s",
			p.Server, p.Tool, p.Def.SHA256, p.Pending.SHA256, p.Pending.SeenAt.UTC().Format(time.RFC3339), acceptCommand(p))))
	}
	return nil
}

func acceptCommand(p Pin) string {
	return "engine gateway pin accept " + strconv.Quote(p.Server) + " " + strconv.Quote(p.Tool)
}

// InboxPins is the inbox's source of the pins to review
// (webui.Config.Pins) on nc's deployment.
func InboxPins(nc *nats.Conn, prefix string) func(context.Context) ([]webui.ToolPin, error) {
	return func(ctx context.Context) ([]webui.ToolPin, error) {
		pins, err := PinsToReview(ctx, nc, prefix)
		if err != nil {
			return nil, err
		}
		out := make([]webui.ToolPin, 0, len(pins))
		for _, p := range pins {
			out = append(out, webui.ToolPin{Server: p.Server, Tool: p.Tool, Pinned: p.Def.SHA256, Pending: p.Pending.SHA256, SeenAt: p.Pending.SeenAt, Accept: acceptCommand(p)})
		}
		return out, nil
	}
}
