package hostconfig

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/tools"
)

// logBuffer is a log sink the host's goroutines may share.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMux: the host's own paths reach its handler, every other path the
// UI's.
func TestMux(t *testing.T) {
	t.Parallel()
	h := openRunner(t, t.TempDir())
	ui := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ui") })
	srv := httptest.NewServer(h.Mux(ui))
	t.Cleanup(srv.Close)
	tests := []struct {
		path   string
		status int
		body   string
	}{
		{"/healthz", http.StatusOK, "ok\n"},
		{"/metrics", http.StatusOK, "noeta_engine_"},
		{"/", http.StatusOK, "ui"},
		{"/api/v1/tasks", http.StatusOK, "ui"},
		{"/login", http.StatusOK, "ui"},
		// No observers.fanout section: the host serves no stream.
		{"/tasks/01J9Z3K7Q4M8X2V6B5N0C1D2E3/events", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		resp, err := http.Get(srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(body), tt.body) {
			t.Errorf("GET %s: %d %q, want %d with %q", tt.path, resp.StatusCode, cut(string(body)), tt.status, tt.body)
		}
	}
}

func cut(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// closer counts its Close calls.
type closer struct{ n atomic.Int32 }

func (c *closer) Close() { c.n.Add(1) }

// TestServeUntil: once its context ends, a serving host drains, ends the
// live streams, shuts the HTTP server down and closes, logging each step;
// a segment still in hand is waited for until the grace ends or a second
// signal comes, and is then left to expire.
func TestServeUntil(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("noeta.yaml", []byte("agents:\n  a: {tools: [block]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// inHand starts a task whose tool call blocks until it is stopped.
		inHand  bool
		grace   time.Duration
		signals int
		want    []string
		// abandoned is the tasks the drain leaves to expire.
		abandoned int
		within    time.Duration
	}{
		{name: "idle", grace: time.Minute, signals: 1, want: []string{"stopping: no new tasks", "msg=stopped"}, within: 20 * time.Second},
		{name: "grace runs out", inHand: true, grace: 500 * time.Millisecond, want: []string{"in_flight=1", "left_to_expire=1"}, abandoned: 1, within: 20 * time.Second},
		{name: "second signal", inHand: true, grace: time.Hour, signals: 2, want: []string{"second signal: the segments still running stop now", "left_to_expire=1"}, abandoned: 1, within: 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{}, 1)
			block := tools.Define(tools.Def{Name: "block", Risk: tools.RiskLow, Run: func(ctx context.Context, _ tools.Call) (tools.Result, error) {
				started <- struct{}{}
				<-ctx.Done()
				return tools.Result{OK: true, Output: json.RawMessage(`"stopped"`)}, nil
			}})
			var logs logBuffer
			h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 1, Workspace: t.TempDir(), Name: "test",
				Tools: []tools.Tool{block}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(h.Close)
			if tt.inHand {
				if _, err := h.Submit(t.Context(), task(t, "agent: a\ngoal: g\nscript:\n  - tool_calls: [{tool: block, args: {}}]\n  - finish: {answer: done}\n")); err != nil {
					t.Fatal(err)
				}
				select {
				case <-started:
				case <-time.After(time.Minute):
					t.Fatal("the task's call never started")
				}
			}
			srv := httptest.NewServer(h.Mux(http.NotFoundHandler()))
			defer srv.Close()
			streams := &closer{}
			sigs := make(chan os.Signal, 4)
			ctx, stop := context.WithCancel(t.Context())
			for range tt.signals {
				sigs <- syscall.SIGTERM
			}
			stop()
			start := time.Now()
			rep := h.ServeUntil(ctx, ServeOptions{Grace: tt.grace, Signals: sigs, Server: srv.Config, Streams: streams})
			if took := time.Since(start); took > tt.within {
				t.Errorf("took %v, want within %v", took, tt.within)
			}
			if len(rep.Abandoned) != tt.abandoned {
				t.Errorf("abandoned %v, want %d", rep.Abandoned, tt.abandoned)
			}
			if streams.n.Load() != 1 {
				t.Errorf("streams closed %d times, want once", streams.n.Load())
			}
			if _, err := http.Get(srv.URL + "/healthz"); err == nil {
				t.Error("the HTTP server still serves")
			}
			for _, want := range tt.want {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the log lacks %q:\n%s", want, logs.String())
				}
			}
		})
	}
}

// TestWhereAndDescribe: a host names its deployment by its data
// directory, the holder whose server it uses, or the NATS servers; its
// flags reach it again, with a prefix that is not the default.
func TestWhereAndDescribe(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	holder := openRunner(t, data)
	client, err := Open(t.Context(), Options{DataDir: data, ReadOnly: true, Name: "client"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	remote, err := Open(t.Context(), Options{NATS: Connection{URL: srv.ClientURL()}, Prefix: "other", Name: "remote"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remote.Close)
	tests := []struct {
		name                   string
		h                      *Host
		where, describe, flags string
	}{
		{"holder", holder, "data " + holder.DataDir(), "embedded", "--data " + holder.DataDir()},
		{"client", client, "data " + client.DataDir(), "the embedded server of ", "--data " + client.DataDir()},
		{"remote", remote, "nats " + srv.ClientURL(), srv.ClientURL(), "--nats " + srv.ClientURL() + " --prefix other"},
	}
	for _, tt := range tests {
		if got := tt.h.Where(); !strings.HasPrefix(got, tt.where) {
			t.Errorf("%s: Where() = %q, want %q", tt.name, got, tt.where)
		}
		if got := tt.h.Flags(); got != tt.flags {
			t.Errorf("%s: Flags() = %q, want %q", tt.name, got, tt.flags)
		}
		if got := tt.h.Describe(); !strings.Contains(got, tt.describe) {
			t.Errorf("%s: Describe() = %q, want it to hold %q", tt.name, got, tt.describe)
		}
	}
}
