package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/observers"
)

// TestNotificationWebhooks: the hooks observer of observer-worker POSTs a
// notification for a task that asks a question and for one that fails, to
// a real local server, with the header its config reads from the
// environment and the task's agent; the worker's environment is read
// through its lookup, once, and the runs are counted on its /metrics.
func TestNotificationWebhooks(t *testing.T) {
	var (
		mu  sync.Mutex
		got []observers.Notification
		hdr []string
	)
	arrived := make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var n observers.Notification
		_ = json.Unmarshal(b, &n)
		mu.Lock()
		got = append(got, n)
		hdr = append(hdr, r.Header.Get("Authorization"))
		mu.Unlock()
		arrived <- struct{}{}
	}))
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "noeta.yaml")
	yaml := "agents: {a: {tools: [echo]}}\nhooks:\n  notification:\n    - on: [question, failed]\n      url: " + srv.URL + "/hook\n      headers: {Authorization: \"env:HOOK_TOKEN\"}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	eng := runEngine(t, "notify")
	ctx, cancel := context.WithCancel(t.Context())
	var out, errb syncBuffer
	done := make(chan int, 1)
	env := map[string]string{"HOOK_TOKEN": "Bearer w0rker"}
	go func() {
		done <- runEnv(ctx, []string{"--nats", natsURL, "--prefix", "notify", "--observers", "hooks,metrics", "--config", cfg, "--workspace", dir, "--http", "127.0.0.1:0"},
			&out, &errb, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	}()
	var ids []string
	for _, script := range []string{`[{"yield_for_human":{"question":"which disk?"}}]`, `[{"fail":{"error":"boom"}}]`} {
		id, err := eng.Submit(t.Context(), engine.Submission{Agent: "a", Goal: "g", Script: []byte(script)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for range 2 {
		select {
		case <-arrived:
		case code := <-done:
			t.Fatalf("the worker exited %d:\n%s", code, errb.String())
		case <-time.After(time.Minute):
			t.Fatalf("no notification within a minute:\n%s", errb.String())
		}
	}
	// The hooks' counters are on the worker's /metrics.
	m := regexp.MustCompile(`http listening.* addr=(\S+)`).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no listening address in the log:\n%s", errb.String())
	}
	var metrics string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + m[1] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if metrics = string(b); strings.Contains(metrics, `noeta_observer_hook_runs_total{outcome="ran"} 2`) {
			break
		}
	}
	if !strings.Contains(metrics, `noeta_observer_hook_runs_total{outcome="ran"} 2`) || !strings.Contains(metrics, `noeta_observer_hook_runs_total{outcome="failed"} 0`) {
		t.Errorf("/metrics has no hook counters:\n%s", metrics)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(got, func(a, b observers.Notification) int { return strings.Compare(a.Event, b.Event) })
	if len(got) != 2 || got[0].Event != "failed" || got[0].Task != ids[1] || got[0].Error != "boom" || got[0].Agent != "a" ||
		got[1].Event != "question" || got[1].Task != ids[0] || got[1].Question != "which disk?" || got[1].Handle == "" || got[1].Agent != "a" {
		t.Fatalf("notifications: %+v", got)
	}
	for _, h := range hdr {
		if h != "Bearer w0rker" {
			t.Errorf("Authorization %q, want the environment's value", h)
		}
	}
}
