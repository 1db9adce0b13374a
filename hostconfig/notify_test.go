package hostconfig

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/observers"
)

// TestNotificationInProcess: a runner host runs the config's notification
// webhooks itself, off the emit path: a task that asks for an approval is
// POSTed to a real local server with the task's agent and the tool, and
// the header the host's environment gives, and counted on its metrics.
func TestNotificationInProcess(t *testing.T) {
	t.Parallel()
	got := make(chan observers.Notification, 4)
	auth := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var n observers.Notification
		_ = json.Unmarshal(b, &n)
		auth <- r.Header.Get("Authorization")
		got <- n
	}))
	defer srv.Close()
	cfg := exampleConfig(t)
	cfg.Hooks.Notification = []config.NotificationHook{{On: []string{config.HookOnApproval}, URL: srv.URL,
		Headers: map[string]string{"Authorization": "env:HOOK_TOKEN"}, Timeout: 5 * time.Second, Retries: 1}}
	h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, Workspace: t.TempDir(), Name: "test",
		LookupEnv: func(k string) (string, bool) {
			if k == "HOOK_TOKEN" {
				return "Bearer h0st", true
			}
			return "", false
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	id, err := h.Submit(t.Context(), task(t, "agent: researcher\ngoal: g\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo hi'}}]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n.Event != "approval" || n.Task != id || n.Agent != "researcher" || n.Tool != "shell" || n.Handle == "" {
			t.Fatalf("notification %+v", n)
		}
		if a := <-auth; a != "Bearer h0st" {
			t.Fatalf("Authorization %q", a)
		}
	case <-time.After(time.Minute):
		t.Fatal("no notification within a minute")
	}
	// Counted on the host's registry (/metrics) once answered.
	ran := func() float64 {
		mfs, err := h.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "noeta_engine_hook_runs_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "ran" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return -1
	}
	for deadline := time.Now().Add(30 * time.Second); ran() != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("noeta_engine_hook_runs_total{outcome=ran} is %v, want 1", ran())
		}
	}
}

// failingPolicy fails every turn with an error that is not the task's
// fault, so every segment fails as retryable.
type failingPolicy struct{}

func (failingPolicy) Decide(context.Context, noeta.PolicyInput) (noeta.Decision, error) {
	return noeta.Decision{}, errors.New("the model server is unreachable")
}

// TestNotificationRetriesExhausted: a task whose every segment fails ends,
// at the dispatcher's attempt cap, with a TaskFailed in its log; the failed
// notification fires with the reason, and doctor finds the store clean.
// Before, the dispatcher ended the task in its row alone: no terminal
// record, no notification, and doctor reported a log that had lost its
// end.
func TestNotificationRetriesExhausted(t *testing.T) {
	t.Parallel()
	got := make(chan observers.Notification, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var n observers.Notification
		_ = json.Unmarshal(b, &n)
		got <- n
	}))
	defer srv.Close()
	cfg := exampleConfig(t)
	cfg.Hooks.Notification = []config.NotificationHook{{On: []string{config.HookOnFailed}, URL: srv.URL, Timeout: 5 * time.Second, Retries: 1}}
	h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, Workspace: t.TempDir(), Name: "test",
		Policies:          func(context.Context, *engine.State) (engine.Policy, error) { return failingPolicy{}, nil },
		SegmentRetryPause: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	id, err := h.Submit(t.Context(), task(t, "agent: researcher\ngoal: g\nscript:\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n.Event != config.HookOnFailed || n.Task != id ||
			!strings.HasPrefix(n.Error, eventlog.ReasonMaxAttemptsExceeded+": ") || !strings.Contains(n.Error, "the model server is unreachable") {
			t.Fatalf("notification %+v", n)
		}
	case <-time.After(time.Minute):
		t.Fatal("no failed notification within a minute")
	}
	rep, err := h.Doctor(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Clean {
		t.Errorf("doctor: %+v", rep.Problems)
	}
}
