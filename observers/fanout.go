package observers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Defaults of a Fanout.
const (
	DefaultFanoutQueueSize = 256
	DefaultFanoutQuiet     = 200 * time.Millisecond
	DefaultFanoutKeepAlive = 15 * time.Second
)

// Why a FanoutSub closed, as its Err says.
var (
	// ErrSlowConsumer: the subscriber's queue was full when a record came;
	// the record and everything after it are not delivered to it.
	ErrSlowConsumer = errors.New("observers: fanout: slow consumer")
	// ErrFanoutClosed: the Fanout was closed.
	ErrFanoutClosed = errors.New("observers: fanout: closed")
	// ErrSubscriptionClosed: the subscriber closed it.
	ErrSubscriptionClosed = errors.New("observers: fanout: subscription closed")
)

// FanoutConfig configures [NewFanout].
type FanoutConfig struct {
	// QueueSize is each subscriber's queue (DefaultFanoutQueueSize).
	QueueSize int
	Logger    *slog.Logger
	// Quiet is how long a followed SSE stream stays open after the task's
	// terminal record, for inbox records still on their way; each one that
	// comes restarts it (DefaultFanoutQuiet).
	Quiet time.Duration
	// KeepAlive is the interval of the SSE comment lines sent while a stream
	// is idle, so that proxies keep it open (DefaultFanoutKeepAlive).
	KeepAlive time.Duration
}

// Fanout hands committed records, live, to any number of consumers: an SSE
// client following a task, a CLI tailing events. Each subscriber has a
// bounded queue of its own, and Observe never waits for one: a subscriber
// whose queue is full is closed on the spot (ErrSlowConsumer) and counted,
// and the others go on. A consumer that must not miss anything reads the
// history from an [eventlog.Reader] and uses the live stream to follow, as
// [Fanout.SSEHandler] does.
//
// Subscribers share the envelopes they receive: they must not modify a
// Payload. Observe is safe to call from many writers at once; records reach a
// subscriber in the order Observe was called.
type Fanout struct {
	cfg FanoutConfig

	mu     sync.RWMutex
	all    map[*FanoutSub]struct{}            // subscribed to every task
	byTask map[string]map[*FanoutSub]struct{} // subscribed to one task
	closed bool

	observed, delivered, slow atomic.Uint64
}

// FanoutStats counts what a Fanout did.
type FanoutStats struct {
	Subscribers int    // open subscriptions now
	Observed    uint64 // records offered to Observe
	Delivered   uint64 // records put in a subscriber's queue
	SlowClosed  uint64 // subscribers closed because their queue was full
}

var _ Observer = (*Fanout)(nil)

// NewFanout returns an empty Fanout.
func NewFanout(cfg FanoutConfig) *Fanout {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultFanoutQueueSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Quiet <= 0 {
		cfg.Quiet = DefaultFanoutQuiet
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = DefaultFanoutKeepAlive
	}
	return &Fanout{cfg: cfg, all: map[*FanoutSub]struct{}{}, byTask: map[string]map[*FanoutSub]struct{}{}}
}

// Name is "fanout".
func (f *Fanout) Name() string { return "fanout" }

// Observe offers env to every subscriber of its task and of all tasks. It
// never blocks and never fails.
func (f *Fanout) Observe(_ context.Context, env eventlog.Envelope) error {
	f.observed.Add(1)
	var slow []*FanoutSub
	f.mu.RLock()
	if !f.closed {
		for s := range f.all {
			if !s.offer(env) {
				slow = append(slow, s)
			}
		}
		for s := range f.byTask[env.Task] {
			if !s.offer(env) {
				slow = append(slow, s)
			}
		}
	}
	f.mu.RUnlock()
	for _, s := range slow {
		f.slow.Add(1)
		f.remove(s)
		f.cfg.Logger.Warn("fanout: a subscriber could not keep up and was closed", "filter_task", s.task, "queue", cap(s.ch), "task", env.Task, "seq", env.Seq, "key", env.Key)
	}
	return nil
}

// Subscribe opens a subscription to the records of task, or of every task
// if task is "". After Close it returns a subscription already closed with
// ErrFanoutClosed.
func (f *Fanout) Subscribe(task string) *FanoutSub {
	s := &FanoutSub{f: f, task: task, ch: make(chan eventlog.Envelope, f.cfg.QueueSize)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		s.shut(ErrFanoutClosed)
		return s
	}
	if task == "" {
		f.all[s] = struct{}{}
		return s
	}
	m := f.byTask[task]
	if m == nil {
		m = map[*FanoutSub]struct{}{}
		f.byTask[task] = m
	}
	m[s] = struct{}{}
	return s
}

func (f *Fanout) remove(s *FanoutSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.task == "" {
		delete(f.all, s)
		return
	}
	if m := f.byTask[s.task]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(f.byTask, s.task)
		}
	}
}

// Close closes every subscription (ErrFanoutClosed); later records are not
// delivered. It is idempotent.
func (f *Fanout) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	for s := range f.all {
		s.shut(ErrFanoutClosed)
	}
	for _, m := range f.byTask {
		for s := range m {
			s.shut(ErrFanoutClosed)
		}
	}
	f.all, f.byTask = nil, nil
	return nil
}

// Stats returns the counters.
func (f *Fanout) Stats() FanoutStats {
	f.mu.RLock()
	n := len(f.all)
	for _, m := range f.byTask {
		n += len(m)
	}
	f.mu.RUnlock()
	return FanoutStats{Subscribers: n, Observed: f.observed.Load(), Delivered: f.delivered.Load(), SlowClosed: f.slow.Load()}
}

// FanoutSub is one consumer of a Fanout.
type FanoutSub struct {
	f    *Fanout
	task string
	ch   chan eventlog.Envelope

	mu     sync.Mutex // guards closed, err, and sends on ch against its close
	closed bool
	err    error
}

// C delivers the records, in the order Observe saw them. It is closed when
// the subscription closes; records queued before that can still be read.
func (s *FanoutSub) C() <-chan eventlog.Envelope { return s.ch }

// Err is nil while the subscription is open, then why it closed:
// ErrSlowConsumer, ErrFanoutClosed or ErrSubscriptionClosed.
func (s *FanoutSub) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription. It is idempotent.
func (s *FanoutSub) Close() {
	if s.shut(ErrSubscriptionClosed) {
		s.f.remove(s)
	}
}

// offer queues env without waiting; false means the queue was full and the
// subscription has just been closed for it.
func (s *FanoutSub) offer(env eventlog.Envelope) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true
	}
	select {
	case s.ch <- env:
		s.f.delivered.Add(1)
		return true
	default:
		s.closed, s.err = true, ErrSlowConsumer
		close(s.ch)
		return false
	}
}

// shut closes the subscription with err unless it is closed already, and
// reports whether it did.
func (s *FanoutSub) shut(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closed, s.err = true, err
	close(s.ch)
	return true
}

// RecordJSON is the JSON form of a record on the SSE stream and on a hook's
// stdin: the envelope's identity and provenance, and the payload as stored.
// Seq is 0 and Key set for an inbox record.
type RecordJSON struct {
	ID            string          `json:"id"`
	Task          string          `json:"task"`
	Seq           uint64          `json:"seq"`
	Key           string          `json:"key,omitempty"`
	Type          string          `json:"type"`
	Time          time.Time       `json:"time"`
	Actor         string          `json:"actor"`
	Origin        eventlog.Origin `json:"origin"`
	LeaseGen      uint64          `json:"lease_gen"`
	CorrelationID string          `json:"correlation_id"`
	Payload       json.RawMessage `json:"payload"`
}

// NewRecordJSON projects env.
func NewRecordJSON(env eventlog.Envelope) RecordJSON {
	return RecordJSON{
		ID: env.ID, Task: env.Task, Seq: env.Seq, Key: env.Key, Type: env.Type, Time: env.Time,
		Actor: env.Actor, Origin: env.Origin, LeaseGen: env.LeaseGen, CorrelationID: env.CorrelationID,
		Payload: env.Payload,
	}
}

// SSEHandler serves a task's records as server-sent events:
//
//	GET /tasks/{id}/events[?follow=false]
//
// Every record is one event: "id: <seq>" ("id: in-<key>" for an inbox
// record), "event: <type>", "data: <RecordJSON>". The stream first replays the
// task's history from r (the log, then the inbox), then follows it live; it
// subscribes before it reads, and de-duplicates by seq (inbox: by key), so a
// record written meanwhile is sent exactly once. Log records are sent in seq
// order without a gap: a live record beyond the next seq (one delivered out of
// order, or after a record the feed dropped) makes the stream read the
// missing ones from r first.
//
// A Last-Event-ID header holding a seq resumes after it: the log records up to
// it are not sent again, the inbox records are (an inbox id does not say where
// in the log the client was, so "in-<key>" resumes from the start; either way
// ids are stable, and a client de-duplicates by them). ?follow=false ends the
// stream after the replay.
//
// A followed stream ends when the task's terminal record has been sent and no
// inbox record came for FanoutConfig.Quiet, when the client goes away, or
// when the subscription is closed (a slow client, or Close): then an "event:
// error" with data {"reason": ...} is sent first. An unknown task is a 404, an
// id that cannot be a task id or a bad Last-Event-ID or follow a 400.
func (f *Fanout) SSEHandler(r eventlog.Reader) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /tasks/{id}/events", func(w http.ResponseWriter, req *http.Request) {
		f.serveSSE(w, req, r)
	})
	return mux
}

func (f *Fanout) serveSSE(w http.ResponseWriter, req *http.Request, r eventlog.Reader) {
	ctx := req.Context()
	task := req.PathValue("id")
	if err := noeta.ValidateTaskID(task); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	follow := true
	if v := req.URL.Query().Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			http.Error(w, fmt.Sprintf("follow=%q: want true or false", v), http.StatusBadRequest)
			return
		}
		follow = b
	}
	var after uint64
	if v := req.Header.Get("Last-Event-ID"); v != "" && !strings.HasPrefix(v, "in-") {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("Last-Event-ID %q: want a seq or in-<key>", v), http.StatusBadRequest)
			return
		}
		after = n
	}

	var sub *FanoutSub
	if follow {
		// Before the reads: whatever is committed after them is delivered.
		sub = f.Subscribe(task)
		defer sub.Close()
	}
	// From one before after, to see whether the last record the client has
	// is the terminal one.
	recs, err := r.Read(ctx, task, max(after, 1)-1)
	var inbox []eventlog.Envelope
	if err == nil {
		inbox, err = r.Inbox(ctx, task)
	}
	switch {
	case errors.Is(err, eventlog.ErrNotFound):
		http.Error(w, fmt.Sprintf("no task %s", task), http.StatusNotFound)
		return
	case err != nil:
		if ctx.Err() == nil {
			f.cfg.Logger.Warn("fanout: reading a task for an SSE stream failed", "task", task, "err", err)
			http.Error(w, "reading the task failed", http.StatusInternalServerError)
		}
		return
	}

	rc := http.NewResponseController(w)
	// A stream outlives a server's write timeout, and its read timeout,
	// whose passing would end the request's context.
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if req.Method == http.MethodHead {
		return
	}
	st := &sseStream{f: f, w: w, rc: rc, r: r, task: task, last: after, keys: map[string]bool{}}
	if st.flush(); st.err != nil {
		return
	}

	for _, env := range recs {
		if env.Seq <= after {
			st.terminal = st.terminal || noeta.IsTerminalType(env.Type)
			continue
		}
		st.send(env)
	}
	for _, env := range inbox {
		st.send(env)
	}
	if !follow || st.err != nil {
		return
	}
	st.follow(ctx, sub)
}

// sseStream is one client's stream: what it has been sent, and the writer.
type sseStream struct {
	f    *Fanout
	w    http.ResponseWriter
	rc   *http.ResponseController
	r    eventlog.Reader
	task string

	last     uint64          // highest log seq sent (or resumed after)
	keys     map[string]bool // inbox keys sent
	terminal bool            // the terminal record has been sent
	err      error           // the first write error: the client is gone
}

func (st *sseStream) follow(ctx context.Context, sub *FanoutSub) {
	keepAlive := time.NewTicker(st.f.cfg.KeepAlive)
	defer keepAlive.Stop()
	var quiet *time.Timer
	var quietC <-chan time.Time
	defer func() {
		if quiet != nil {
			quiet.Stop()
		}
	}()
	for st.err == nil {
		if st.terminal && quiet == nil {
			// Inbox records committed before the terminal one were delivered
			// live, unless the feed dropped them: read them to be sure.
			inbox, err := st.r.Inbox(ctx, st.task)
			if err != nil {
				if ctx.Err() == nil {
					st.f.cfg.Logger.Warn("fanout: reading a task's inbox for an SSE stream failed", "task", st.task, "err", err)
					st.errorEvent("reading the task failed")
				}
				return
			}
			for _, env := range inbox {
				st.send(env)
			}
			quiet = time.NewTimer(st.f.cfg.Quiet)
			quietC = quiet.C
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-quietC:
			return
		case <-keepAlive.C:
			st.write([]byte(": keep-alive\n\n"))
		case env, ok := <-sub.C():
			if !ok {
				st.errorEvent(fanoutReason(sub.Err()))
				return
			}
			st.live(ctx, env)
			if quiet != nil && env.Seq == 0 {
				quiet.Reset(st.f.cfg.Quiet)
			}
		}
	}
}

// live sends a record the subscription delivered, unless it was sent; a log
// record beyond the next seq first brings the missing ones from the Reader.
func (st *sseStream) live(ctx context.Context, env eventlog.Envelope) {
	if env.Seq > st.last+1 {
		recs, err := st.r.Read(ctx, st.task, st.last)
		if err != nil {
			if ctx.Err() == nil {
				st.f.cfg.Logger.Warn("fanout: reading the records an SSE stream missed failed", "task", st.task, "after", st.last, "err", err)
				st.errorEvent("reading the task failed")
				st.err = err
			}
			return
		}
		for _, r := range recs {
			st.send(r)
		}
	}
	st.send(env)
}

// send writes env as an event unless it was sent already.
func (st *sseStream) send(env eventlog.Envelope) {
	if st.err != nil {
		return
	}
	var id string
	if env.Seq == 0 {
		if env.Key == "" || st.keys[env.Key] {
			return
		}
		st.keys[env.Key] = true
		id = "in-" + env.Key
	} else {
		if env.Seq <= st.last {
			return
		}
		st.last = env.Seq
		id = strconv.FormatUint(env.Seq, 10)
		if noeta.IsTerminalType(env.Type) {
			st.terminal = true
		}
	}
	data, err := json.Marshal(NewRecordJSON(env))
	if err != nil {
		st.f.cfg.Logger.Warn("fanout: a record cannot be encoded for SSE", "task", env.Task, "seq", env.Seq, "key", env.Key, "err", err)
		st.errorEvent("a record cannot be encoded")
		st.err = err
		return
	}
	b := make([]byte, 0, len(data)+len(id)+len(env.Type)+24)
	b = append(b, "id: "...)
	b = append(b, id...)
	b = append(b, "\nevent: "...)
	b = append(b, env.Type...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	st.write(b)
}

func (st *sseStream) errorEvent(reason string) {
	data, _ := json.Marshal(map[string]string{"reason": reason})
	st.write([]byte("event: error\ndata: " + string(data) + "\n\n"))
}

func (st *sseStream) write(b []byte) {
	if st.err != nil {
		return
	}
	if _, err := st.w.Write(b); err != nil {
		st.err = err
		return
	}
	st.flush()
}

func (st *sseStream) flush() {
	if err := st.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		st.err = err
	}
}

// fanoutReason is the reason an SSE client is given for a closed
// subscription.
func fanoutReason(err error) string {
	switch {
	case errors.Is(err, ErrSlowConsumer):
		return "slow consumer"
	case errors.Is(err, ErrFanoutClosed):
		return "server shutting down"
	case err == nil:
		return "closed"
	}
	return strings.TrimPrefix(err.Error(), "observers: fanout: ")
}
