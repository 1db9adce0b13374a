package hostconfig

import (
	"context"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/host"
)

// rateConfig gives agent dev 2 echo calls an hour per principal.
func rateConfig(t *testing.T) *config.File {
	t.Helper()
	cfg, err := config.Parse("noeta.yaml", []byte(`
agents:
  dev:
    tools: [echo]
    rate_limits:
      - {tool: echo, calls: 2, window: 1h}
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runEchoes submits a task of dev by principal that calls echo n times,
// one call a turn, waits for its end and returns the guard of each call's
// denial ("" for a call that ran).
func runEchoes(t *testing.T, h *Host, principal string, n int) []string {
	t.Helper()
	body := "agent: dev\ngoal: g\nscript:\n" + strings.Repeat("  - tool_calls: [{tool: echo, args: {text: hi}}]\n", n) + "  - finish: {answer: done}\n"
	sub := task(t, body)
	sub.SubmittedBy = principal
	id, err := h.Submit(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(t.Context(), id)
	if err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("task of %s: %+v, %v", principal, rest, err)
	}
	envs, err := h.Events(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, env := range envs {
		p, ok, err := env.Decode()
		if err != nil || !ok {
			continue
		}
		switch p := p.(type) {
		case *noeta.ToolCallFinished:
			out = append(out, "")
		case *noeta.ToolCallDenied:
			if p.Guard == guards.NameRateLimit && !strings.Contains(p.Reason, `rate limit reached: 2 calls per 1h of "echo" for principal "`+principal+`"`) {
				t.Errorf("denial reason %q", p.Reason)
			}
			out = append(out, p.Guard)
		}
	}
	return out
}

// TestRateLimitEndToEnd: a host of noeta.yaml with a rate limit runs a
// scripted task whose third echo call in the hour is denied and recorded
// as ToolCallDenied by the rate_limit guard; the count is the principal's
// across tasks, and another principal's is apart.
func TestRateLimitEndToEnd(t *testing.T) {
	t.Parallel()
	h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: rateConfig(t), Workers: 1, Workspace: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	want := func(got []string, want ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("calls %q, want %q", got, want)
		}
	}
	want(runEchoes(t, h, "cli:alice", 3), "", "", guards.NameRateLimit)
	want(runEchoes(t, h, "cli:alice", 1), guards.NameRateLimit)
	want(runEchoes(t, h, "cli:bob", 1), "")
}

// TestRateLimitAcrossHosts: two hosts on one NATS server (two engines of a
// fleet) take from the deployment's one count.
func TestRateLimitAcrossHosts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	open := func(name string) *Host {
		h, err := Open(ctx, Options{NATS: Connection{URL: srv.ClientURL()}, Prefix: "fleet", Config: rateConfig(t), Workers: 1,
			Workspace: t.TempDir(), Name: name, Queue: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		return h
	}
	a, b := open("a"), open("b")
	if got := runEchoes(t, a, "http:carol", 2); strings.Join(got, ",") != "," {
		t.Fatalf("host a: %q", got)
	}
	if got := runEchoes(t, b, "http:carol", 1); strings.Join(got, ",") != guards.NameRateLimit {
		t.Fatalf("host b after host a spent the limit: %q", got)
	}
}

// TestRateLimitSharedBackendNeedsACounter: a host on a backend other
// processes share, with rate limits and no counter, is refused; a
// counter-less stack would count in this process alone.
func TestRateLimitSharedBackendNeedsACounter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := embedded.Start(ctx, embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	h, err := Open(ctx, Options{NATS: Connection{URL: srv.ClientURL()}, Prefix: "bare", Config: rateConfig(t), Name: "client"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	reg := h.Tools()
	_, err = host.Open(context.Background(), h.Backend(), host.Options{Governance: h.Config().Governance, Tools: reg, Workers: 1, Deferred: true})
	if err == nil || !strings.Contains(err.Error(), "Options.Rates must be a counter they share") {
		t.Fatalf("got %v", err)
	}
}
