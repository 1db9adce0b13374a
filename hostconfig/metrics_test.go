package hostconfig

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
)

// TestOneRegistryPerPort: the process's registry (the pool's counters, the
// metrics observer's instruments, noeta_build_info) passes the Prometheus
// linter after a task ran, and is served on one port only: with
// observers.metrics.listen there, and /metrics of Handler answers 404
// naming it; without, on Handler.
func TestOneRegistryPerPort(t *testing.T) {
	t.Parallel()
	base, err := os.ReadFile("../examples/noeta.yaml")
	if err != nil {
		t.Fatal(err)
	}
	get := func(t *testing.T, h http.Handler, url string) (int, string) {
		t.Helper()
		var resp *http.Response
		if h != nil {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", url, nil))
			resp = rec.Result()
		} else if resp, err = http.Get(url); err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, observers string
		listen          bool
	}{
		{"on the HTTP of serve", "", false},
		{"on observers.metrics.listen", "observers:\n  metrics: {listen: \"127.0.0.1:0\"}\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse("noeta.yaml", append(base, tc.observers...))
			if err != nil {
				t.Fatal(err)
			}
			h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, Workspace: t.TempDir(), ServesHTTP: true, Name: "test"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.Close)
			id, err := h.Submit(t.Context(), task(t, "agent: helper\ngoal: g\nscript: [{tool_calls: [{tool: echo, args: {text: hi}}]}, {finish: {answer: ok}}]\n"))
			if err != nil {
				t.Fatal(err)
			}
			if rest, err := h.Wait(t.Context(), id); err != nil || rest.Status != host.RestCompleted {
				t.Fatalf("%+v %v", rest, err)
			}
			problems, err := testutil.GatherAndLint(h.Registry())
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("%s: %s", p.Metric, p.Text)
			}
			code, body := get(t, h.Handler(), "/metrics")
			if !tc.listen {
				if code != http.StatusOK || !strings.Contains(body, "noeta_build_info{") || !strings.Contains(body, "noeta_engine_segments_total") {
					t.Fatalf("/metrics: %d\n%.400s", code, body)
				}
				return
			}
			addr := h.metricsListen()
			if code != http.StatusNotFound || addr == "" || !strings.Contains(body, addr) {
				t.Fatalf("/metrics of serve beside observers.metrics.listen %q: %d %s", addr, code, body)
			}
			if code, body := get(t, nil, "http://"+addr+"/metrics"); code != http.StatusOK || !strings.Contains(body, "noeta_build_info{") {
				t.Fatalf("observers.metrics.listen: %d\n%.400s", code, body)
			}
		})
	}
}
