package configured_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/observers/configured"
	"github.com/noeta-go/noeta/observers/telemetry"
)

func parse(t *testing.T, doc string) *config.File {
	t.Helper()
	f, err := config.Parse("noeta.yaml", []byte("agents: {a: {tools: [echo]}}\n"+doc))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// closeObserver stops what New built, by its kind.
func closeObserver(t *testing.T, o observers.Observer) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch o := o.(type) {
	case *observers.Audit:
		err = o.Close()
	case *observers.Hooks:
		err = o.Close(ctx)
	case *observers.Fanout:
		err = o.Close()
	case *telemetry.Metrics:
		err = o.Shutdown(ctx)
	case *telemetry.Trace:
		err = o.Shutdown(ctx)
	default:
		t.Fatalf("New built a %T", o)
	}
	if err != nil {
		t.Errorf("closing %T: %v", o, err)
	}
}

// TestEveryNameIsBuilt: each name of Names is configured by a file that has
// every section, and New builds it, so a name without its case cannot be
// added.
func TestEveryNameIsBuilt(t *testing.T) {
	dir := t.TempDir()
	f := parse(t, `observers:
  audit: {file: `+filepath.Join(dir, "audit.jsonl")+`}
  metrics: {listen: "127.0.0.1:0"}
  trace: {otlp_endpoint: "127.0.0.1:1", protocol: http, insecure: true}
  fanout: {}
hooks:
  post_tool_use: [{match_tool: "*", command: [/bin/true]}]
`)
	want := map[string]string{
		configured.Audit: "*observers.Audit", configured.Metrics: "*telemetry.Metrics", configured.Trace: "*telemetry.Trace",
		configured.Fanout: "*observers.Fanout", configured.Hooks: "*observers.Hooks",
	}
	if len(configured.Names) != len(want) {
		t.Errorf("Names = %v; this test knows %d", configured.Names, len(want))
	}
	for _, name := range configured.Names {
		if !configured.In(f, name) {
			t.Errorf("In(%s) = false", name)
		}
		o, err := configured.New(t.Context(), f, name, configured.Options{Registry: prometheus.NewRegistry(), Workspace: dir})
		if err != nil {
			t.Errorf("New(%s): %v", name, err)
			continue
		}
		if got := typeName(o); got != want[name] {
			t.Errorf("New(%s) = %s, want %s", name, got, want[name])
		}
		closeObserver(t, o)
	}
	if _, err := os.Stat(filepath.Join(dir, "audit.jsonl")); err != nil {
		t.Errorf("the audit file was not opened: %v", err)
	}
	empty := parse(t, "")
	for _, name := range configured.Names {
		if configured.In(empty, name) || configured.In(nil, name) {
			t.Errorf("In(%s) of a file without it = true", name)
		}
	}
}

func typeName(o observers.Observer) string {
	switch o.(type) {
	case *observers.Audit:
		return "*observers.Audit"
	case *observers.Hooks:
		return "*observers.Hooks"
	case *observers.Fanout:
		return "*observers.Fanout"
	case *telemetry.Metrics:
		return "*telemetry.Metrics"
	case *telemetry.Trace:
		return "*telemetry.Trace"
	}
	return "?"
}

// TestErrorsNameTheField: what cannot be built from the config is an
// *Error naming its field, which the callers place at its line; nothing is
// built half.
func TestErrorsNameTheField(t *testing.T) {
	hooks := func(h config.Hooks) *config.File { return &config.File{Hooks: h} }
	audit := func(a config.Audit) *config.File { return &config.File{Observers: config.Observers{Audit: &a}} }
	for _, tt := range []struct {
		name  string
		f     *config.File
		obs   string
		o     configured.Options
		field string
		want  string
	}{
		{"audit stdout without one", audit(config.Audit{Stdout: true}), configured.Audit, configured.Options{}, "observers.audit.stdout", "no standard output"},
		{"audit subject without NATS", audit(config.Audit{Subject: "audit"}), configured.Audit, configured.Options{}, "observers.audit.subject", "no NATS connection"},
		{"audit with two sinks", audit(config.Audit{Stdout: true, File: "x"}), configured.Audit, configured.Options{Stdout: &bytes.Buffer{}}, "observers.audit", "exactly one sink"},
		{"audit unconfigured", &config.File{}, configured.Audit, configured.Options{}, "observers.audit", "not configured"},
		{"hooks built in Go, broken", hooks(config.Hooks{PostToolUse: []config.ToolHook{{MatchTool: "*"}}}), configured.Hooks, configured.Options{},
			"hooks", "hooks.post_tool_use[0].command: required"},
		{"a webhook header's variable unset", hooks(config.Hooks{Notification: []config.NotificationHook{{On: []string{config.HookOnFailed}, URL: "https://h.example/x", Headers: map[string]string{"Authorization": "env:NOPE"}}}}),
			configured.Hooks, configured.Options{LookupEnv: func(string) (string, bool) { return "", false }}, "hooks", "environment variable NOPE is not set"},
		{"hooks without a file", nil, configured.Hooks, configured.Options{}, "hooks", "not configured"},
		{"trace unconfigured", &config.File{}, configured.Trace, configured.Options{}, "observers.trace", "not configured"},
		{"trace on an unknown protocol", nil, configured.Trace, configured.Options{OTLP: &telemetry.OTLPConfig{Protocol: "carrier-pigeon"}}, "observers.trace", "carrier-pigeon"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := configured.New(t.Context(), tt.f, tt.obs, tt.o)
			ce, ok := errors.AsType[*configured.Error](err)
			if !ok || ce.Field != tt.field || !strings.Contains(err.Error(), tt.want) || o != nil {
				t.Errorf("New = %v, %v; want an *Error at %s containing %q", o, err, tt.field, tt.want)
			}
		})
	}
	if _, err := configured.New(t.Context(), nil, "tea", configured.Options{}); !errors.Is(err, configured.ErrUnknown) {
		t.Errorf("New(tea) = %v, want ErrUnknown", err)
	}
}

// TestField: the config paths the callers' errors name.
func TestField(t *testing.T) {
	for name, want := range map[string]string{
		configured.Audit: "observers.audit", configured.Hooks: "hooks", configured.Trace: "observers.trace",
		configured.Metrics: "observers.metrics", configured.Fanout: "observers.fanout",
	} {
		if got := configured.Field(name); got != want {
			t.Errorf("Field(%s) = %q, want %q", name, got, want)
		}
	}
}
