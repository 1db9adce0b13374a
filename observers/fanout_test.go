package observers

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// ---- fanout harness ----

// fanoutFixture is a memlog store with a Fanout subscribed to it in-process
// (on the writers' goroutines) and an SSE server over it.
type fanoutFixture struct {
	*harness
	fo  *Fanout
	srv *httptest.Server
}

func newFanoutFixture(t *testing.T, cfg FanoutConfig) *fanoutFixture {
	return newFanoutFixtureReader(t, cfg, nil)
}

// newFanoutFixtureReader serves the SSE stream from wrap(store) when wrap is
// not nil.
func newFanoutFixtureReader(t *testing.T, cfg FanoutConfig, wrap func(eventlog.Reader) eventlog.Reader) *fanoutFixture {
	t.Helper()
	h := newHarness(t)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(h.logs, nil))
	}
	fo := NewFanout(cfg)
	sub := h.s.Subscribe(fo.Observe)
	var r eventlog.Reader = h.s
	if wrap != nil {
		r = wrap(r)
	}
	srv := httptest.NewServer(fo.SSEHandler(r))
	t.Cleanup(func() {
		srv.Close()
		sub.Cancel()
		fo.Close()
		if st := sub.Stats(); st.Failed != 0 || st.Panicked != 0 {
			t.Errorf("subscription stats %+v: want no failed or panicked deliveries", st)
		}
	})
	return &fanoutFixture{harness: h, fo: fo, srv: srv}
}

// sseEvent is one event as a client parses it.
type sseEvent struct {
	ID, Event, Data string
}

// readSSE parses an event stream to its end.
func readSSE(r io.Reader) ([]sseEvent, error) {
	var out []sseEvent
	var cur sseEvent
	var has bool
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && line == "" {
				return out, nil
			}
			return out, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if has {
				out = append(out, cur)
			}
			cur, has = sseEvent{}, false
		case strings.HasPrefix(line, ":"):
			// a comment
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			has = true
			switch field {
			case "id":
				cur.ID = value
			case "event":
				cur.Event = value
			case "data":
				cur.Data += value
			}
		}
	}
}

type sseRequest struct {
	task        string
	query       string
	lastEventID string
}

// get requests a task's stream and reads it to its end.
func (fx *fanoutFixture) get(t *testing.T, req sseRequest) (int, []sseEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	u := fx.srv.URL + "/tasks/" + req.task + "/events"
	if req.query != "" {
		u += "?" + req.query
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if req.lastEventID != "" {
		hreq.Header.Set("Last-Event-ID", req.lastEventID)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	evs, err := readSSE(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream of %s: %v (after %d events)", u, err, len(evs))
	}
	return resp.StatusCode, evs
}

// logSeqs returns the seqs of the log events, failing on an event whose id
// and data disagree.
func logSeqs(t *testing.T, evs []sseEvent) []uint64 {
	t.Helper()
	var seqs []uint64
	for _, ev := range evs {
		if strings.HasPrefix(ev.ID, "in-") || ev.Event == "error" {
			continue
		}
		n, err := strconv.ParseUint(ev.ID, 10, 64)
		if err != nil {
			t.Fatalf("event id %q: %v", ev.ID, err)
		}
		var rec RecordJSON
		if err := json.Unmarshal([]byte(ev.Data), &rec); err != nil {
			t.Fatalf("event %s data %q: %v", ev.ID, ev.Data, err)
		}
		if rec.Seq != n || rec.Type != ev.Event {
			t.Fatalf("event id %s event %s carries seq %d type %s", ev.ID, ev.Event, rec.Seq, rec.Type)
		}
		seqs = append(seqs, n)
	}
	return seqs
}

func inboxIDs(evs []sseEvent) []string {
	var ids []string
	for _, ev := range evs {
		if strings.HasPrefix(ev.ID, "in-") {
			ids = append(ids, ev.ID)
		}
	}
	return ids
}

// wantSeqs checks that seqs are exactly from..to, each once, in order.
func wantSeqs(t *testing.T, seqs []uint64, from, to uint64) {
	t.Helper()
	if uint64(len(seqs)) != to-from+1 {
		t.Errorf("got %d log events, want seqs %d..%d (%d)", len(seqs), from, to, to-from+1)
	}
	for i, s := range seqs {
		if want := from + uint64(i); s != want {
			t.Fatalf("event %d has seq %d, want %d (seqs %v)", i, s, want, seqs)
		}
	}
}

func (fx *fanoutFixture) systemEmit(task, key string) eventlog.Envelope {
	fx.t.Helper()
	env := mustEnvelope(fx.t, task, eventlog.OriginObserver, noeta.SubtaskCompleted{SubtaskID: "child-" + key, Status: noeta.SubtaskStatusCompleted})
	got, err := fx.s.SystemEmit(fx.t.Context(), task, key, env)
	if err != nil {
		fx.t.Fatalf("SystemEmit(%s, %s): %v", task, key, err)
	}
	return got
}

// slowReader delays every Read, widening the window between the stream's
// subscription and its replay, so that records written meanwhile reach the
// stream both ways.
type slowReader struct {
	eventlog.Reader
	delay time.Duration
}

func (r *slowReader) Read(ctx context.Context, task string, after uint64) ([]eventlog.Envelope, error) {
	time.Sleep(r.delay)
	return r.Reader.Read(ctx, task, after)
}

// ---- cases ----

// The stream replays what was written before the request and follows what is
// written after, while a writer appends all along: every seq exactly once,
// in order, across the boundary, and the stream ends after the terminal
// record.
func TestFanoutSSEReplayThenFollow(t *testing.T) {
	fx := newFanoutFixtureReader(t, FanoutConfig{Quiet: 50 * time.Millisecond}, func(r eventlog.Reader) eventlog.Reader {
		return &slowReader{Reader: r, delay: 3 * time.Millisecond}
	})
	for _, startAt := range []int{0, 1, 7, 50, 150, 299} {
		t.Run(fmt.Sprintf("client joins after %d records", startAt), func(t *testing.T) {
			id, l := fx.rootTask()
			const n = 300
			joined := make(chan struct{})
			var last eventlog.Envelope
			var wg sync.WaitGroup
			wg.Go(func() {
				defer func() {
					select {
					case <-joined:
					default:
						close(joined)
					}
				}()
				for i := range n {
					if i == startAt {
						close(joined)
					}
					if _, err := fx.emitErr(t.Context(), l, noeta.TurnStarted{Turn: i + 1}); err != nil {
						t.Error(err)
						return
					}
					if i == n/2 {
						env := mustEnvelope(t, id, eventlog.OriginObserver, noeta.SubtaskCompleted{SubtaskID: "c", Status: noeta.SubtaskStatusCompleted})
						if _, err := fx.s.SystemEmit(t.Context(), id, "subtask-c", env); err != nil {
							t.Error(err)
							return
						}
					}
					if i%8 == 0 {
						time.Sleep(200 * time.Microsecond)
					}
				}
				env, err := fx.emitErr(t.Context(), l, noeta.TaskCompleted{Answer: json.RawMessage(`"done"`)})
				if err != nil {
					t.Error(err)
					return
				}
				last = env
			})
			<-joined
			code, evs := fx.get(t, sseRequest{task: id})
			wg.Wait()
			if code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			if t.Failed() {
				return
			}
			wantSeqs(t, logSeqs(t, evs), 1, last.Seq)
			if got := inboxIDs(evs); len(got) != 1 || got[0] != "in-subtask-c" {
				t.Errorf("inbox events %v, want [in-subtask-c]", got)
			}
		})
	}
	if st := fx.fo.Stats(); st.SlowClosed != 0 || st.Subscribers != 0 {
		t.Errorf("stats %+v: want no slow consumer and no subscriber left", st)
	}
}

// Each event carries the envelope as JSON.
func TestFanoutSSEEventData(t *testing.T) {
	fx := newFanoutFixture(t, FanoutConfig{})
	id, l := fx.rootTask()
	fx.emit(l, noeta.ToolCallFinished{CallID: "c1", Tool: "echo", OK: true, Output: json.RawMessage(`{"text":"hi"}`), DurationMS: 3})
	fx.systemEmit(id, "subtask-x")
	_, evs := fx.get(t, sseRequest{task: id, query: "follow=false"})
	stored, err := fx.s.Read(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	inbox := fx.inbox(id)
	want := append(stored, inbox...)
	if len(evs) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, env := range want {
		ev := evs[i]
		wantID := strconv.FormatUint(env.Seq, 10)
		if env.Seq == 0 {
			wantID = "in-" + env.Key
		}
		if ev.ID != wantID || ev.Event != env.Type {
			t.Errorf("event %d: id %q event %q, want %q %q", i, ev.ID, ev.Event, wantID, env.Type)
		}
		var got RecordJSON
		if err := json.Unmarshal([]byte(ev.Data), &got); err != nil {
			t.Fatalf("event %d data: %v", i, err)
		}
		w := NewRecordJSON(env)
		if got.ID != w.ID || got.Task != id || got.Seq != w.Seq || got.Key != w.Key || got.Type != w.Type || !got.Time.Equal(w.Time) ||
			got.Actor != w.Actor || got.Origin != w.Origin || got.LeaseGen != w.LeaseGen || got.CorrelationID != w.CorrelationID ||
			string(got.Payload) != string(w.Payload) {
			t.Errorf("event %d data\n%s\nwant %+v", i, ev.Data, w)
		}
	}
	// The field names are the contract.
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(evs[2].Data), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "task", "seq", "type", "time", "actor", "origin", "lease_gen", "correlation_id", "payload"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("data has no %q: %s", k, evs[2].Data)
		}
	}
	if !strings.Contains(evs[2].Data, `"payload":{"call_id":"c1"`) || !strings.Contains(evs[3].Data, `"key":"subtask-x"`) {
		t.Errorf("data: %s / %s", evs[2].Data, evs[3].Data)
	}
}

func TestFanoutSSELastEventID(t *testing.T) {
	fx := newFanoutFixture(t, FanoutConfig{Quiet: 20 * time.Millisecond})
	id, l := fx.rootTask()
	for i := range 7 {
		fx.emit(l, noeta.TurnStarted{Turn: i + 1})
	}
	fx.systemEmit(id, "subtask-a")
	end := fx.emit(l, noeta.TaskCompleted{Answer: json.RawMessage(`"ok"`)}) // seq 10

	for _, tt := range []struct {
		name, lastID, query string
		from                uint64
	}{
		{"resume after 5, replay only", "5", "follow=false", 6},
		{"resume after 5, following a finished task ends", "5", "", 6},
		{"resume after the terminal record ends at once", strconv.FormatUint(end.Seq, 10), "", end.Seq + 1},
		{"resume beyond the log", "99", "follow=false", 100},
		{"an inbox id replays the log", "in-subtask-a", "", 1},
		{"no id", "", "follow=0", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, evs := fx.get(t, sseRequest{task: id, query: tt.query, lastEventID: tt.lastID})
			if code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			to := end.Seq
			if tt.from > to {
				to = tt.from - 1
			}
			wantSeqs(t, logSeqs(t, evs), tt.from, to)
			if got := inboxIDs(evs); len(got) != 1 {
				t.Errorf("inbox events %v: an inbox record is sent on every resume", got)
			}
		})
	}
	if code, _ := fx.get(t, sseRequest{task: id, lastEventID: "five"}); code != http.StatusBadRequest {
		t.Errorf("Last-Event-ID five: status %d, want 400", code)
	}
}

// follow=false ends after the replay even though the task goes on; a resume
// then picks up what was written since.
func TestFanoutSSENoFollow(t *testing.T) {
	fx := newFanoutFixture(t, FanoutConfig{})
	id, l := fx.rootTask()
	fx.emit(l, noeta.TurnStarted{Turn: 1})
	_, evs := fx.get(t, sseRequest{task: id, query: "follow=false"})
	wantSeqs(t, logSeqs(t, evs), 1, 3)
	fx.emit(l, noeta.TurnStarted{Turn: 2})
	_, evs = fx.get(t, sseRequest{task: id, query: "follow=false", lastEventID: evs[len(evs)-1].ID})
	wantSeqs(t, logSeqs(t, evs), 4, 4)
	if st := fx.fo.Stats(); st.Subscribers != 0 {
		t.Errorf("a replay-only stream left %d subscribers", st.Subscribers)
	}
}

func TestFanoutSSEBadRequests(t *testing.T) {
	fx := newFanoutFixture(t, FanoutConfig{})
	id, _ := fx.rootTask()
	for _, tt := range []struct {
		name string
		req  sseRequest
		want int
	}{
		{"unknown task", sseRequest{task: noeta.NewTaskID()}, http.StatusNotFound},
		{"unknown task, no follow", sseRequest{task: "nope", query: "follow=false"}, http.StatusNotFound},
		{"not a task id", sseRequest{task: "a.b"}, http.StatusBadRequest},
		{"bad follow", sseRequest{task: id, query: "follow=maybe"}, http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, _ := fx.get(t, tt.req); code != tt.want {
				t.Errorf("status %d, want %d", code, tt.want)
			}
		})
	}
	resp, err := http.Post(fx.srv.URL+"/tasks/"+id+"/events", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d, want 405", resp.StatusCode)
	}
	// HEAD answers at once, even for a task that is still running.
	resp, err = http.Head(fx.srv.URL + "/tasks/" + id + "/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("HEAD: status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if st := fx.fo.Stats(); st.Subscribers != 0 {
		t.Errorf("refused requests left %d subscribers", st.Subscribers)
	}
}

// A subscriber that never reads is closed when its queue is full, and
// counted; a fast one receives everything; the writer, on whose goroutine
// Observe runs, is never held up.
func TestFanoutSlowConsumerIsClosed(t *testing.T) {
	const queue = 4
	fx := newFanoutFixture(t, FanoutConfig{QueueSize: queue})
	id := noeta.NewTaskID()
	slow := fx.fo.Subscribe("")
	fast := fx.fo.Subscribe(id)
	other := fx.fo.Subscribe(noeta.NewTaskID())
	fx.create(id, "", "")
	if st := fx.fo.Stats(); st.Subscribers != 3 {
		t.Fatalf("stats %+v, want 3 subscribers", st)
	}

	// The fast consumer reports every record; the writer waits for that
	// report, so the fast consumer is never behind, while the slow one
	// never reads at all.
	got := make(chan eventlog.Envelope, 1)
	var fastSeqs []uint64
	var cw sync.WaitGroup
	cw.Go(func() {
		for env := range fast.C() {
			fastSeqs = append(fastSeqs, env.Seq)
			got <- env
		}
	})
	l := fx.lease(id)
	<-got // TaskCreated, written before the lease
	const n = 100
	done := make(chan error, 1)
	go func() {
		for i := range n {
			env, err := fx.emitErr(t.Context(), l, noeta.TurnStarted{Turn: i + 1})
			if err != nil {
				done <- err
				return
			}
			for r := range got {
				if r.Seq == env.Seq {
					break
				}
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the writer was held up: Observe blocked")
	}

	if err := slow.Err(); !errors.Is(err, ErrSlowConsumer) {
		t.Errorf("slow.Err() = %v, want ErrSlowConsumer", err)
	}
	var queued int
	for range slow.C() {
		queued++
	}
	if queued != queue {
		t.Errorf("the slow subscriber kept %d records, want its queue (%d)", queued, queue)
	}
	if fast.Err() != nil || other.Err() != nil {
		t.Errorf("fast.Err() = %v, other.Err() = %v, want both open", fast.Err(), other.Err())
	}
	st := fx.fo.Stats()
	if st.SlowClosed != 1 || st.Subscribers != 2 {
		t.Errorf("stats %+v, want 1 slow consumer closed and 2 subscribers left", st)
	}
	fx.fo.Close()
	cw.Wait()
	wantSeqs(t, fastSeqs, 1, n+2)
	if !errors.Is(fast.Err(), ErrFanoutClosed) || !errors.Is(other.Err(), ErrFanoutClosed) {
		t.Errorf("after Close: fast.Err() = %v, other.Err() = %v", fast.Err(), other.Err())
	}
	if _, ok := <-other.C(); ok {
		t.Error("the subscriber of another task received a record")
	}
	if !fx.logs.contains("fanout: a subscriber could not keep up") {
		t.Error("the slow consumer was not logged")
	}
	// Closed subscriptions stay closed; a subscription after Close is born
	// closed.
	fast.Close()
	if !errors.Is(fast.Err(), ErrFanoutClosed) {
		t.Errorf("Close after the fanout closed changed Err to %v", fast.Err())
	}
	late := fx.fo.Subscribe("")
	if _, ok := <-late.C(); ok || !errors.Is(late.Err(), ErrFanoutClosed) {
		t.Errorf("a subscription after Close: open, or Err %v", late.Err())
	}
	if err := fx.fo.Observe(t.Context(), eventlog.Envelope{Task: id, Seq: 999}); err != nil {
		t.Errorf("Observe after Close: %v", err)
	}
}

func TestFanoutSubscriptionClose(t *testing.T) {
	fo := NewFanout(FanoutConfig{QueueSize: 2})
	s := fo.Subscribe("t1")
	fo.Observe(t.Context(), eventlog.Envelope{Task: "t1", Seq: 1})
	s.Close()
	s.Close()
	if !errors.Is(s.Err(), ErrSubscriptionClosed) {
		t.Errorf("Err() = %v", s.Err())
	}
	if env, ok := <-s.C(); !ok || env.Seq != 1 {
		t.Errorf("a record queued before Close is still readable: got %v %v", env, ok)
	}
	if _, ok := <-s.C(); ok {
		t.Error("C is not closed")
	}
	fo.Observe(t.Context(), eventlog.Envelope{Task: "t1", Seq: 2})
	fo.Observe(t.Context(), eventlog.Envelope{Task: "t1", Seq: 3})
	fo.Observe(t.Context(), eventlog.Envelope{Task: "t1", Seq: 4})
	if st := fo.Stats(); st.Subscribers != 0 || st.SlowClosed != 0 || st.Observed != 4 || st.Delivered != 1 {
		t.Errorf("stats %+v", st)
	}
}

// gateWriter is a ResponseWriter whose writes wait while the gate is held.
type gateWriter struct {
	header http.Header
	mu     sync.Mutex
	buf    strings.Builder
	hold   chan struct{} // writes wait until it is closed; nil: they don't
	wrote  chan struct{} // a note after every write
	held   chan struct{} // a note when a write starts waiting
}

func (w *gateWriter) Header() http.Header { return w.header }
func (w *gateWriter) WriteHeader(int)     {}
func (w *gateWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	hold := w.hold
	w.mu.Unlock()
	if hold != nil {
		select {
		case w.held <- struct{}{}:
		default:
		}
		<-hold
	}
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	select {
	case w.wrote <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (w *gateWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// A stream whose client cannot keep up is closed as a slow consumer: it
// sends what it had queued, then an error event, and ends.
func TestFanoutSSESlowClient(t *testing.T) {
	const queue = 3
	fx := newFanoutFixture(t, FanoutConfig{QueueSize: queue})
	id, l := fx.rootTask()
	fx.emit(l, noeta.TurnStarted{Turn: 1}) // seq 3
	w := &gateWriter{header: http.Header{}, wrote: make(chan struct{}, 1), held: make(chan struct{}, 1)}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/tasks/"+id+"/events", nil)
	served := make(chan struct{})
	go func() {
		defer close(served)
		fx.fo.SSEHandler(fx.s).ServeHTTP(w, req)
	}()
	for !strings.Contains(w.String(), "id: 3\n") {
		select {
		case <-w.wrote:
		case <-time.After(10 * time.Second):
			t.Fatalf("no replay: %q", w.String())
		}
	}
	release := make(chan struct{})
	w.mu.Lock()
	w.hold = release
	w.mu.Unlock()
	// The first live record blocks the stream in its write; then one more
	// than its queue holds.
	fx.emit(l, noeta.TurnStarted{Turn: 2})
	select {
	case <-w.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not write the live record")
	}
	for i := range queue + 1 {
		if st := fx.fo.Stats(); st.SlowClosed != 0 {
			t.Fatalf("stats %+v after %d records: closed too early", st, i)
		}
		fx.emit(l, noeta.TurnStarted{Turn: i + 3})
	}
	if st := fx.fo.Stats(); st.SlowClosed != 1 {
		t.Fatalf("stats %+v, want the stream's subscriber closed", st)
	}
	close(release)
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
	out := w.String()
	if !strings.HasSuffix(out, "event: error\ndata: {\"reason\":\"slow consumer\"}\n\n") {
		t.Errorf("stream does not end with the error event:\n%s", out)
	}
	evs, err := readSSE(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	// Replay 1..3; live: 4 (the write that blocked) and the queue's 5..7.
	wantSeqs(t, logSeqs(t, evs), 1, 3+1+queue)
}

// Closing the Fanout ends a followed stream with an error event.
func TestFanoutSSEServerClose(t *testing.T) {
	fx := newFanoutFixture(t, FanoutConfig{})
	id, l := fx.rootTask()
	type result struct {
		code int
		evs  []sseEvent
	}
	res := make(chan result, 1)
	go func() {
		code, evs := fx.get(t, sseRequest{task: id})
		res <- result{code, evs}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for fx.fo.Stats().Subscribers == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not subscribe")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fx.emit(l, noeta.TurnStarted{Turn: 1})
	fx.fo.Close()
	var r result
	select {
	case r = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
	if r.code != http.StatusOK || len(r.evs) == 0 {
		t.Fatalf("status %d, %d events", r.code, len(r.evs))
	}
	if last := r.evs[len(r.evs)-1]; last.Event != "error" || last.Data != `{"reason":"server shutting down"}` {
		t.Errorf("last event %+v, want the error event", last)
	}
	wantSeqs(t, logSeqs(t, r.evs), 1, 3)
}

// A live record beyond the next seq (the feed dropped or reordered some)
// makes the stream read the missing ones, so none is lost.
func TestFanoutSSEFillsGaps(t *testing.T) {
	h := newHarness(t)
	fo := NewFanout(FanoutConfig{Quiet: 10 * time.Millisecond})
	srv := httptest.NewServer(fo.SSEHandler(h.s))
	defer srv.Close()
	fx := &fanoutFixture{harness: h, fo: fo, srv: srv}
	id, l := h.rootTask()
	res := make(chan []sseEvent, 1)
	go func() {
		_, evs := fx.get(t, sseRequest{task: id})
		res <- evs
	}()
	deadline := time.Now().Add(10 * time.Second)
	for fo.Stats().Subscribers == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not subscribe")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The fanout is not subscribed to the store: only some records reach
	// it, one of them twice and out of order.
	var envs []eventlog.Envelope
	for i := range 5 {
		envs = append(envs, h.emit(l, noeta.TurnStarted{Turn: i + 1}))
	}
	envs = append(envs, h.emit(l, noeta.TaskFailed{Error: "boom"}))
	for _, i := range []int{3, 1, 3, 5} {
		fo.Observe(t.Context(), envs[i])
	}
	select {
	case evs := <-res:
		wantSeqs(t, logSeqs(t, evs), 1, envs[5].Seq)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end")
	}
}
