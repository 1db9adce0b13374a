package observers

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// hookServer is a real local HTTP server that records what it is sent and
// answers with the statuses of answers in turn (the last one from then on).
type hookServer struct {
	*httptest.Server
	mu      sync.Mutex
	answers []int
	got     []hookRequest
	// block, when set, makes the handler wait for the request to end.
	block bool
}

type hookRequest struct {
	header http.Header
	body   []byte
}

func newHookServer(t *testing.T, answers ...int) *hookServer {
	t.Helper()
	s := &hookServer{answers: answers}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.got = append(s.got, hookRequest{header: r.Header.Clone(), body: body})
		n := len(s.got)
		status := s.answers[min(n-1, len(s.answers)-1)]
		block := s.block
		s.mu.Unlock()
		if block {
			<-r.Context().Done()
			return
		}
		if status/100 == 3 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *hookServer) requests() []hookRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]hookRequest(nil), s.got...)
}

func webhook(url string, retries int, on ...string) NotificationHook {
	return NotificationHook{On: on, URL: url, Retries: retries, Timeout: 5 * time.Second}
}

func testWebhooks(t *testing.T, hooks ...NotificationHook) (*Hooks, *logSink) {
	t.Helper()
	return newTestHooks(t, HooksObserverConfig{Notification: hooks, WebhookBackoff: 5 * time.Millisecond,
		LookupEnv: func(k string) (string, bool) {
			v, ok := map[string]string{"HOOK_TOKEN": "Bearer t0ken"}[k]
			return v, ok
		}})
}

func observeAll(t *testing.T, h *Hooks, envs ...eventlog.Envelope) {
	t.Helper()
	for _, env := range envs {
		if err := h.Observe(t.Context(), env); err != nil {
			t.Fatalf("Observe %s: %v", env.Type, err)
		}
	}
}

// TestWebhookEvents: each of approval, question, parked and failed POSTs one
// JSON body with what a person needs, the agent learnt from the task's
// TaskCreated, and the configured headers (a value from the environment
// read once); a suspend that is neither a question nor a park, and a hook
// on other events, send nothing.
func TestWebhookEvents(t *testing.T) {
	all := newHookServer(t, 204)
	failedOnly := newHookServer(t, 200)
	wh := webhook(all.URL+"/hook", 0, "approval", "question", "parked", "failed")
	wh.Headers = map[string]string{"Authorization": "env:HOOK_TOKEN", "X-Team": "sre"}
	h, _ := testWebhooks(t, wh, webhook(failedOnly.URL, 0, "failed"))
	big := `{"content":"` + strings.Repeat("x", 2*NotificationArgsMax) + `"}`
	observeAll(t, h,
		hookRecord(t, "wt", 1, noeta.TaskCreated{TaskID: "wt", Agent: "ops", Goal: "g", RootTaskID: "wt"}),
		hookRecord(t, "wt", 5, noeta.ApprovalRequested{Handle: "approval-c1", Action: noeta.ApprovalToolCall, CallID: "c1",
			Tool: "write_file", Args: json.RawMessage(big), Guard: "permission", Reason: "writes need approval"}),
		hookRecord(t, "wt", 6, noeta.TaskSuspended{Reason: "waiting_approval", WakeOn: noeta.HumanResponseWake("approval-c1")}),
		hookRecord(t, "wt", 8, noeta.TaskSuspended{Reason: "waiting_human: which tone?", WakeOn: noeta.HumanResponseWake("question-3")}),
		hookRecord(t, "wt", 9, noeta.TaskSuspended{Reason: "waiting_subtasks", WakeOn: noeta.Wake{Kind: noeta.WakeSubtaskCompleted, SubtaskID: "x"}}),
		hookRecord(t, "wt", 11, noeta.TaskSuspended{Reason: "parked: turn 4 was left unfinished 3 times in a row", WakeOn: noeta.HumanResponseWake("park-4")}),
		hookRecord(t, "wt", 12, noeta.TaskFailed{Error: "budget exhausted", Guard: "budget"}),
	)
	closeHooks(t, h)
	reqs := all.requests()
	if len(reqs) != 4 {
		t.Fatalf("the hook on four events was sent %d requests, want 4", len(reqs))
	}
	want := []Notification{
		{Event: "approval", Task: "wt", Agent: "ops", Handle: "approval-c1", Action: "tool_call", Tool: "write_file", CallID: "c1",
			ArgsCut: true, Guard: "permission", Reason: "writes need approval", Seq: 5},
		{Event: "question", Task: "wt", Agent: "ops", Handle: "question-3", Question: "which tone?", Seq: 8},
		{Event: "parked", Task: "wt", Agent: "ops", Handle: "park-4", Reason: "turn 4 was left unfinished 3 times in a row", Seq: 11},
		{Event: "failed", Task: "wt", Agent: "ops", Error: "budget exhausted", Guard: "budget", Seq: 12},
	}
	for i, r := range reqs {
		var got Notification
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatalf("request %d: %v\n%s", i, err, r.body)
		}
		if got.Time.IsZero() {
			t.Errorf("request %d has no time", i)
		}
		if i == 0 {
			if !json.Valid(got.Args) || len(got.Args) > NotificationArgsMax+16 {
				t.Errorf("approval args not cut: %d bytes", len(got.Args))
			}
			got.Args = nil
		}
		got.Time = time.Time{}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("request %d:\n got %+v\nwant %+v", i, got, want[i])
		}
		for k, v := range map[string]string{"Authorization": "Bearer t0ken", "X-Team": "sre", "Content-Type": "application/json", "Noeta-Notification": want[i].Event} {
			if r.header.Get(k) != v {
				t.Errorf("request %d header %s = %q, want %q", i, k, r.header.Get(k), v)
			}
		}
		if r.header.Get("Noeta-Event-Id") == "" {
			t.Errorf("request %d has no Noeta-Event-Id", i)
		}
	}
	if n := len(failedOnly.requests()); n != 1 {
		t.Errorf("the hook on failed only was sent %d requests, want 1", n)
	}
	if st := h.Stats(); st.Ran != 5 || st.Failed != 0 || st.Retried != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestWebhookRetries: a 5xx, a 408 and a 429 are tried again, with
// backoff, up to the hook's retries; a 4xx else and a redirect are not (the
// redirect is not followed: the target never hears of it); every failure is
// counted and logged, never returned to the feed.
func TestWebhookRetries(t *testing.T) {
	elsewhere := newHookServer(t, 200)
	tests := []struct {
		name     string
		answers  []int
		retries  int
		requests int
		stats    HooksStats
		log      string
	}{
		{"503 then 200", []int{503, 502, 200}, 3, 3, HooksStats{Queued: 1, Ran: 1, Retried: 2}, "delivered"},
		{"408 and 429 retried", []int{408, 429}, 2, 3, HooksStats{Queued: 1, Failed: 1, Retried: 2}, "answered 429"},
		{"500 past the retries", []int{500}, 1, 2, HooksStats{Queued: 1, Failed: 1, Retried: 1}, "the webhook failed; the notification is lost"},
		{"400 not retried", []int{400, 200}, 3, 1, HooksStats{Queued: 1, Failed: 1}, "answered 400"},
		{"401 not retried", []int{401, 200}, 3, 1, HooksStats{Queued: 1, Failed: 1}, "answered 401"},
		{"redirect not followed", []int{307}, 3, 1, HooksStats{Queued: 1, Failed: 1}, "redirects are not followed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newHookServer(t, tt.answers...)
			h, logs := testWebhooks(t, webhook(s.URL, tt.retries, "failed"))
			observeAll(t, h, hookRecord(t, "wr", 3, noeta.TaskFailed{Error: "boom"}))
			closeHooks(t, h)
			if n := len(s.requests()); n != tt.requests {
				t.Errorf("%d requests, want %d", n, tt.requests)
			}
			if st := h.Stats(); st != tt.stats {
				t.Errorf("stats %+v, want %+v", st, tt.stats)
			}
			if !logs.contains(tt.log) {
				t.Errorf("the log does not say %q", tt.log)
			}
		})
	}
	if n := len(elsewhere.requests()); n != 0 {
		t.Errorf("a redirect target was sent %d requests", n)
	}
}

// TestWebhookConnectionErrorRetried: a server that cannot be reached is
// tried again up to the retries, then counted as failed.
func TestWebhookConnectionErrorRetried(t *testing.T) {
	s := newHookServer(t, 200)
	url := s.URL
	s.Close()
	h, logs := testWebhooks(t, webhook(url, 2, "failed"))
	observeAll(t, h, hookRecord(t, "wc", 3, noeta.TaskFailed{Error: "boom"}))
	closeHooks(t, h)
	if st := h.Stats(); st != (HooksStats{Queued: 1, Failed: 1, Retried: 2}) {
		t.Errorf("stats %+v", st)
	}
	if !logs.contains("connection refused") {
		t.Error("the log does not name the connection error")
	}
}

// TestWebhookTimeout: an attempt that outlives the hook's timeout is given
// up and tried again; when the last one times out it is counted as timed
// out.
func TestWebhookTimeout(t *testing.T) {
	s := newHookServer(t, 200)
	s.block = true
	wh := webhook(s.URL, 1, "failed")
	wh.Timeout = 200 * time.Millisecond
	h, logs := testWebhooks(t, wh)
	observeAll(t, h, hookRecord(t, "wto", 3, noeta.TaskFailed{Error: "boom"}))
	closeHooks(t, h)
	if n := len(s.requests()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}
	if st := h.Stats(); st != (HooksStats{Queued: 1, TimedOut: 1, Retried: 1}) {
		t.Errorf("stats %+v", st)
	}
	if !logs.contains("the webhook timed out on its last attempt") {
		t.Error("the timeout was not logged")
	}
}

// TestWebhookHeaderFromMissingEnv: a header naming a variable that is not
// set is a configuration error when the hooks start, not an unauthenticated
// POST later.
func TestWebhookHeaderFromMissingEnv(t *testing.T) {
	wh := webhook("https://hooks.example.com/x", 0, "failed")
	wh.Headers = map[string]string{"Authorization": "env:NOT_SET_ANYWHERE"}
	_, err := NewHooks(HooksObserverConfig{Notification: []NotificationHook{wh}, LookupEnv: func(string) (string, bool) { return "", false }})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "header Authorization: environment variable NOT_SET_ANYWHERE is not set") {
		t.Fatalf("NewHooks: %v", err)
	}
}

// TestNotificationCommand: the command form runs on every event it names,
// with the record on stdin and the event in NOETA_NOTIFICATION.
func TestNotificationCommand(t *testing.T) {
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "n.sh", `echo "$NOETA_NOTIFICATION $NOETA_HANDLE" >> events; cat >> records`+"\n")
	h, _ := newTestHooks(t, HooksObserverConfig{
		Notification: []NotificationHook{{On: []string{"question", "failed"}, Command: cmd, Timeout: 5 * time.Second}},
		Workspace:    ws,
	})
	observeAll(t, h,
		hookRecord(t, "wn", 4, noeta.TaskSuspended{Reason: "waiting_human: why?", WakeOn: noeta.HumanResponseWake("question-1")}),
		hookRecord(t, "wn", 5, noeta.ApprovalRequested{Handle: "approval-x", Action: noeta.ApprovalFinish, Guard: "g", Reason: "r"}),
		hookRecord(t, "wn", 6, noeta.TaskFailed{Error: "boom"}),
	)
	closeHooks(t, h)
	b, err := os.ReadFile(filepath.Join(ws, "events"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != "question question-1\nfailed \n" {
		t.Errorf("events:\n%s", got)
	}
	recs, _ := os.ReadFile(filepath.Join(ws, "records"))
	lines := strings.Split(strings.TrimSpace(string(recs)), "\n")
	var r RecordJSON
	if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &r) != nil || r.Type != noeta.TypeTaskFailed || r.Seq != 6 {
		t.Errorf("records on stdin:\n%s", recs)
	}
}

// TestWebhookURLSecretsNotLogged: a webhook whose path and query carry its
// token (as Slack's and Discord's do) is logged by its scheme and host
// only, in the failure of an answer and of a connection alike. Before, the
// log line carried url=<the whole URL> and the connection error quoted it
// again.
func TestWebhookURLSecretsNotLogged(t *testing.T) {
	const secret = "T000SECRETPATH"
	s := newHookServer(t, 500)
	closed := newHookServer(t, 200)
	down := closed.URL
	closed.Close()
	for _, url := range []string{s.URL + "/services/" + secret + "?token=Q" + secret, down + "/services/" + secret + "?token=Q" + secret} {
		h, logs := testWebhooks(t, webhook(url, 0, "failed"))
		observeAll(t, h, hookRecord(t, "ws", 3, noeta.TaskFailed{Error: "boom"}))
		closeHooks(t, h)
		if !logs.contains("the webhook failed") {
			t.Fatalf("%s: the failure is not logged", url)
		}
		if logs.contains(secret) {
			t.Errorf("%s: the log shows the URL's path or query:\n%s", url, logs.buf.String())
		}
		if !logs.contains("/[redacted]?[redacted]") {
			t.Errorf("%s: the log does not show where the URL was redacted:\n%s", url, logs.buf.String())
		}
	}
}
