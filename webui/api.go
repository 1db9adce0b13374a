package webui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/observers"
	"github.com/noeta-go/noeta/tasklist"
)

// Bounds of the API.
const (
	// MaxBody bounds a request body.
	MaxBody = 64 << 10
	// MaxReason bounds an answer's reason, in bytes.
	MaxReason = 4 << 10
	// DefaultPage and MaxPage bound GET /api/v1/tasks.
	DefaultPage = 50
	MaxPage     = 200
	// MaxScan bounds the tasks one GET /api/v1/tasks folds.
	MaxScan = 2000
	// MaxEvents bounds one GET /api/v1/tasks/{id}/events list.
	MaxEvents = 1000
	// streamQueue bounds the changes queued for one approvals stream; a
	// client that falls behind is closed and reconnects.
	streamQueue = 1024
)

type ctxKey struct{}

func (s *Server) routes() {
	m := http.NewServeMux()
	static := http.FileServerFS(s.files)
	page := func(w http.ResponseWriter, r *http.Request) {
		// Every page of the app is the one document; the script routes.
		w.Header().Set("Cache-Control", "no-store")
		http.ServeFileFS(w, r, s.files, "index.html")
	}
	m.HandleFunc("GET /{$}", page)
	m.HandleFunc("GET /login", page)
	m.Handle("GET /assets/", http.StripPrefix("/assets/", static))
	m.HandleFunc("POST /api/v1/login", s.login)
	m.HandleFunc("POST /api/v1/logout", s.authed(s.logout))
	m.HandleFunc("GET /api/v1/whoami", s.authed(s.whoami))
	m.HandleFunc("GET /api/v1/approvals", s.authed(s.approvals))
	m.HandleFunc("GET /api/v1/approvals/stream", s.authed(s.approvalsStream))
	m.HandleFunc("GET /api/v1/pins", s.authed(s.pins))
	m.HandleFunc("GET /api/v1/tasks", s.authed(s.tasks))
	m.HandleFunc("GET /api/v1/tasks/{id}", s.authed(s.task))
	m.HandleFunc("GET /api/v1/tasks/{id}/events", s.authed(s.events))
	m.HandleFunc("POST /api/v1/tasks/{id}/approvals/{handle}", s.authed(s.answer))
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, "not-found", "No such endpoint", r.Method+" "+r.URL.Path+" is not an endpoint of the API")
	})
	s.mux = m
}

// authed runs h for an authenticated request; a state-changing one must
// also be JSON from this page (Origin) or carry a bearer token.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, Principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, bearer, err := s.auth.authenticate(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="noeta"`)
			problem(w, http.StatusUnauthorized, "unauthenticated", "Not logged in", err.Error())
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !s.stateChangeAllowed(w, r, bearer) {
				return
			}
		}
		h(w, r, p)
	}
}

// stateChangeAllowed refuses what a page of another site could make a
// browser send: a body that is not JSON (a form), an Origin not this one.
func (s *Server) stateChangeAllowed(w http.ResponseWriter, r *http.Request, bearer bool) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		problem(w, http.StatusUnsupportedMediaType, "json-required", "JSON required", "a request that changes something must be Content-Type: application/json")
		return false
	}
	if !originAllowed(r, bearer) {
		detail := "the Origin " + quote(r.Header.Get("Origin")) + " is not this server"
		if r.Header.Get("Origin") == "" {
			detail = "a request without an Origin header must carry a bearer token"
		}
		problem(w, http.StatusForbidden, "cross-origin", "Cross-origin request refused", detail)
		return false
	}
	return true
}

// decode reads a bounded JSON body into v, strictly.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err == nil {
		if _, rerr := io.Copy(io.Discard, r.Body); rerr != nil {
			err = rerr
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		problem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Body too large", fmt.Sprintf("the body is over %d bytes", MaxBody))
		return false
	case err != nil:
		problem(w, http.StatusBadRequest, "bad-json", "Bad request body", err.Error())
		return false
	}
	return true
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !s.stateChangeAllowed(w, r, r.Header.Get("Origin") == "") {
		return
	}
	var in struct {
		Token string `json:"token"`
	}
	if !decode(w, r, &in) {
		return
	}
	p, cookie, ok := s.auth.login(strings.TrimSpace(in.Token))
	if !ok {
		problem(w, http.StatusUnauthorized, "bad-token", "Wrong token", "the token is not one of http.tokens, or a login token already used")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: cookie, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || s.cfg.BehindTLSProxy, MaxAge: int(s.cfg.SessionTTL / time.Second),
	})
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, _ Principal) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.auth.logout(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, p Principal) {
	writeJSON(w, http.StatusOK, p)
}

// Approval is one entry of GET /api/v1/approvals: the index's entry and its
// age.
type Approval struct {
	eventlog.Waiting
	AgeSeconds float64 `json:"age_seconds"`
}

func (s *Server) approvals(w http.ResponseWriter, r *http.Request, _ Principal) {
	ws, err := s.cfg.Host.Waiting(r.Context())
	cutOff := errors.Is(err, jetstream.ErrWaitingCut)
	switch {
	case cutOff:
		// The oldest entries, and a flag that there are more.
	case errors.Is(err, host.ErrNoWaitingIndex):
		problem(w, http.StatusServiceUnavailable, "no-index", "No inbox yet", err.Error())
		return
	case err != nil:
		s.internal(w, r, "list the pending approvals", err)
		return
	}
	now := time.Now()
	out := make([]Approval, 0, len(ws))
	for _, e := range ws {
		out = append(out, Approval{Waiting: e, AgeSeconds: now.Sub(e.RequestedAt).Seconds()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": out, "cut": cutOff})
}

// pins lists the tool definitions to review; none where nothing lists them.
func (s *Server) pins(w http.ResponseWriter, r *http.Request, _ Principal) {
	out := []ToolPin{}
	if s.cfg.Pins != nil {
		ps, err := s.cfg.Pins(r.Context())
		if err != nil {
			s.internal(w, r, "list the tool pins to review", err)
			return
		}
		out = append(out, ps...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"pins": out})
}

// approvalsStream sends the current set as one "snapshot" event, then each
// change as a "put" or "delete" event, with comment lines while idle.
func (s *Server) approvalsStream(w http.ResponseWriter, r *http.Request, p Principal) {
	release, ok := s.slots.admit(w, p)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := s.streamContext(r)
	defer cancel()
	changes := make(chan eventlog.WaitingChange, streamQueue)
	overflow := make(chan struct{})
	var overflowed bool
	// fn runs on the index's one goroutine and must not block: a client
	// that cannot keep up is closed, and its EventSource reconnects to a
	// fresh snapshot.
	fn := func(c eventlog.WaitingChange) {
		if overflowed {
			return
		}
		select {
		case changes <- c:
		default:
			overflowed = true
			close(overflow)
		}
	}
	stop, err := s.cfg.Host.WatchWaiting(ctx, fn)
	switch {
	case errors.Is(err, host.ErrNoWaitingIndex):
		problem(w, http.StatusServiceUnavailable, "no-index", "No inbox yet", err.Error())
		return
	case err != nil:
		s.internal(w, r, "watch the pending approvals", err)
		return
	}
	defer stop()
	st := newSSE(w)
	if st == nil {
		problem(w, http.StatusInternalServerError, "no-streaming", "Streaming not supported", "the connection cannot stream")
		return
	}
	st.header()
	var initial []Approval
	started := false
	ka := time.NewTicker(s.cfg.KeepAlive)
	defer ka.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-overflow:
			st.event("", "error", map[string]string{"reason": "slow client: reconnect for a fresh snapshot"})
			return
		case <-ka.C:
			if !s.stillAuthenticated(st, r) {
				return
			}
			st.comment("keep-alive")
		case c := <-changes:
			switch {
			case !started && !c.Deleted && c.Entry.Task == "":
				started = true
				if initial == nil {
					initial = []Approval{}
				}
				st.event("", "snapshot", map[string]any{"approvals": initial})
			case !started:
				initial = applyChange(initial, c)
			case c.Deleted:
				st.event("", "delete", map[string]string{"task": c.Entry.Task, "handle": c.Entry.Handle})
			default:
				st.event("", "put", Approval{Waiting: c.Entry, AgeSeconds: time.Since(c.Entry.RequestedAt).Seconds()})
			}
			if st.err != nil {
				return
			}
		}
	}
}

func applyChange(set []Approval, c eventlog.WaitingChange) []Approval {
	for i, a := range set {
		if a.Task == c.Entry.Task && a.Handle == c.Entry.Handle {
			set = append(set[:i], set[i+1:]...)
			break
		}
	}
	if !c.Deleted {
		set = append(set, Approval{Waiting: c.Entry, AgeSeconds: time.Since(c.Entry.RequestedAt).Seconds()})
	}
	return set
}

// TaskRow is one task of GET /api/v1/tasks: its status is a word of
// tasklist.Statuses (completed, failed, cancelled, waiting, …).
type TaskRow = tasklist.Row

// tasks lists the tasks, newest first, a page at a time (limit; cursor,
// the next_cursor of the page before; offset skips matching tasks),
// filtered by status (comma-separated words), agent, since (a duration such
// as 24h, or an RFC 3339 time) and q (text in the id, agent or goal). One
// request folds at most MaxScan tasks: a filter that matches little
// returns a short page and a next_cursor to read on from.
func (s *Server) tasks(w http.ResponseWriter, r *http.Request, _ Principal) {
	q := r.URL.Query()
	limit, err1 := intParam(q.Get("limit"), DefaultPage, 1, MaxPage)
	offset, err2 := intParam(q.Get("offset"), 0, 0, 1<<30)
	cursor, err3 := intParam(q.Get("cursor"), 0, 0, 1<<30)
	since, err4 := tasklist.ParseSince(q.Get("since"), time.Now())
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		problem(w, http.StatusBadRequest, "bad-query", "Bad query", err.Error())
		return
	}
	f := tasklist.Filter{Agent: q.Get("agent"), Text: q.Get("q"), Since: since, Offset: offset, Limit: limit, From: cursor, MaxScan: MaxScan}
	if st := q.Get("status"); st != "" {
		f.Status = strings.Split(st, ",")
	}
	if err := f.Check(); err != nil {
		problem(w, http.StatusBadRequest, "bad-query", "Bad query", err.Error())
		return
	}
	p, err := tasklist.List(r.Context(), s.cfg.Host, f)
	if err != nil {
		s.internal(w, r, "list the tasks", err)
		return
	}
	now := time.Now()
	rows := make([]taskListRow, 0, len(p.Rows))
	for _, row := range p.Rows {
		lr := taskListRow{Row: row}
		if !row.Last.IsZero() {
			lr.AgeSeconds = now.Sub(row.Last).Seconds()
		}
		rows = append(rows, lr)
	}
	out := map[string]any{"tasks": rows, "total": p.Total, "offset": offset, "limit": limit}
	if p.More {
		out["next_cursor"] = p.Next
	}
	writeJSON(w, http.StatusOK, out)
}

// taskListRow is a row with its age, for the page to show "3m ago".
type taskListRow struct {
	tasklist.Row
	AgeSeconds float64 `json:"age_seconds,omitempty"`
}

// TaskDetail is GET /api/v1/tasks/{id}.
type TaskDetail struct {
	TaskRow
	Root    string                           `json:"root"`
	Pending map[string]noeta.PendingApproval `json:"pending_approvals,omitempty"`
	Answer  json.RawMessage                  `json:"answer,omitempty"`
}

func (s *Server) task(w http.ResponseWriter, r *http.Request, _ Principal) {
	id := r.PathValue("id")
	if err := noeta.ValidateTaskID(id); err != nil {
		problem(w, http.StatusBadRequest, "bad-task", "Bad task id", err.Error())
		return
	}
	row, st, err := tasklist.Fold(r.Context(), s.cfg.Host, id)
	if err != nil {
		s.fail(w, r, "read the task", err)
		return
	}
	writeJSON(w, http.StatusOK, TaskDetail{
		TaskRow: row, Root: st.Root, Pending: st.Governance.PendingApprovals, Answer: st.Answer,
	})
}

// events lists a task's records after ?after (a JSON list, at most
// MaxEvents), or with Accept: text/event-stream streams them live from
// Last-Event-ID (a seq) on.
func (s *Server) events(w http.ResponseWriter, r *http.Request, p Principal) {
	id := r.PathValue("id")
	if err := noeta.ValidateTaskID(id); err != nil {
		problem(w, http.StatusBadRequest, "bad-task", "Bad task id", err.Error())
		return
	}
	after := uint64(0)
	v := r.URL.Query().Get("after")
	if lei := r.Header.Get("Last-Event-ID"); lei != "" {
		v = lei
	}
	if v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			problem(w, http.StatusBadRequest, "bad-query", "Bad position", fmt.Sprintf("after / Last-Event-ID %q: want a seq", v))
			return
		}
		after = n
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		envs, err := s.cfg.Host.Events(r.Context(), id, after)
		if err != nil {
			s.fail(w, r, "read the task's records", err)
			return
		}
		more := len(envs) > MaxEvents
		envs = envs[:min(len(envs), MaxEvents)]
		recs := make([]observers.RecordJSON, 0, len(envs))
		for _, e := range envs {
			recs = append(recs, observers.NewRecordJSON(e))
		}
		writeJSON(w, http.StatusOK, map[string]any{"events": recs, "more": more})
		return
	}
	release, ok := s.slots.admit(w, p)
	if !ok {
		return
	}
	defer release()
	s.followEvents(w, r, id, after)
}

// followEvents streams a task's records: the log is the truth, read after
// the last seq sent whenever this process commits one of the task's records
// (Tap) and on a poll for those other processes commit, so nothing is sent
// twice or skipped, whoever wrote it.
func (s *Server) followEvents(w http.ResponseWriter, r *http.Request, id string, after uint64) {
	ctx, cancel := s.streamContext(r)
	defer cancel()
	kick := make(chan struct{}, 1)
	untap := s.cfg.Host.Tap(func(_ context.Context, env eventlog.Envelope) error {
		if env.Task == id {
			select {
			case kick <- struct{}{}:
			default:
			}
		}
		return nil
	})
	defer untap()
	envs, err := s.cfg.Host.Events(ctx, id, after)
	if err != nil {
		s.fail(w, r, "read the task's records", err)
		return
	}
	st := newSSE(w)
	if st == nil {
		problem(w, http.StatusInternalServerError, "no-streaming", "Streaming not supported", "the connection cannot stream")
		return
	}
	st.header()
	send := func(envs []eventlog.Envelope) {
		for _, e := range envs {
			if e.Seq <= after {
				continue
			}
			// One event name for every record: a client need not know
			// every type to miss none; the type is in the data.
			st.event(strconv.FormatUint(e.Seq, 10), "record", observers.NewRecordJSON(e))
			after = e.Seq
		}
	}
	send(envs)
	poll := time.NewTicker(s.cfg.Poll)
	defer poll.Stop()
	ka := time.NewTicker(s.cfg.KeepAlive)
	defer ka.Stop()
	for st.err == nil {
		select {
		case <-ctx.Done():
			return
		case <-ka.C:
			if !s.stillAuthenticated(st, r) {
				return
			}
			st.comment("keep-alive")
			continue
		case <-kick:
		case <-poll.C:
		}
		envs, err := s.cfg.Host.Events(ctx, id, after)
		if err != nil {
			if ctx.Err() == nil {
				st.event("", "error", map[string]string{"reason": "reading the log failed; reconnect"})
				s.cfg.Logger.Warn("webui: reading a task for its live timeline failed", "task", id, "err", err)
			}
			return
		}
		send(envs)
	}
}

type answerBody struct {
	Decision noeta.ApprovalDecision `json:"decision"`
	Reason   string                 `json:"reason"`
}

// answer approves or denies as the principal; nothing in the body names who.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, p Principal) {
	id, handle := r.PathValue("id"), r.PathValue("handle")
	if err := noeta.ValidateTaskID(id); err != nil {
		problem(w, http.StatusBadRequest, "bad-task", "Bad task id", err.Error())
		return
	}
	var in answerBody
	if !decode(w, r, &in) {
		return
	}
	switch {
	case in.Decision != noeta.ApprovalApprove && in.Decision != noeta.ApprovalDeny:
		problem(w, http.StatusBadRequest, "bad-decision", "Bad decision", fmt.Sprintf("decision is %q; want approve or deny", in.Decision))
		return
	case len(in.Reason) > MaxReason:
		problem(w, http.StatusBadRequest, "bad-reason", "Reason too long", fmt.Sprintf("the reason is %d bytes; at most %d", len(in.Reason), MaxReason))
		return
	case !utf8.ValidString(in.Reason):
		problem(w, http.StatusBadRequest, "bad-reason", "Bad reason", "the reason is not UTF-8")
		return
	case handle == "" || len(handle) > 256:
		problem(w, http.StatusBadRequest, "bad-handle", "Bad handle", "the handle is empty or too long")
		return
	}
	err := s.cfg.Host.Approve(r.Context(), id, handle, host.Answer{Decision: in.Decision, Approver: p.Name, Reason: in.Reason, Auth: p.Auth})
	if err != nil {
		s.fail(w, r, "answer", err)
		return
	}
	s.cfg.Logger.Info("webui: answered", "task", id, "handle", handle, "decision", in.Decision, "approver", p.Name, "auth", p.Auth)
	writeJSON(w, http.StatusOK, map[string]any{"task": id, "handle": handle, "decision": in.Decision, "approver": p.Name, "auth": p.Auth})
}

// fail answers err with its status: a request not open is a conflict, a
// refusal of the rules forbidden, a bad argument a bad request.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case errors.Is(err, engine.ErrRequestExpired):
		problem(w, http.StatusConflict, "expired", "The request has expired", err.Error())
	case errors.Is(err, eventlog.ErrNotWaiting) || errors.Is(err, eventlog.ErrAlreadyAnswered):
		problem(w, http.StatusConflict, "not-waiting", "Nothing to answer", err.Error())
	case isForbidden(err):
		problem(w, http.StatusForbidden, "not-allowed", "Not allowed to answer", err.Error())
	case errors.Is(err, eventlog.ErrNotFound):
		problem(w, http.StatusNotFound, "not-found", "No such task", err.Error())
	case errors.Is(err, host.ErrBadOptions) || errors.Is(err, eventlog.ErrInvalidArgument):
		problem(w, http.StatusBadRequest, "bad-request", "Bad request", err.Error())
	case errors.Is(err, host.ErrReadOnly):
		problem(w, http.StatusServiceUnavailable, "read-only", "Read-only", "this process cannot answer: it was opened read-only")
	case isTooMany(err):
		problem(w, http.StatusTooManyRequests, "too-many-wakes", "Too many answers pending", err.Error())
	default:
		s.internal(w, r, what, err)
	}
}

func (s *Server) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	if r.Context().Err() != nil {
		return
	}
	s.cfg.Logger.Error("webui: "+what+" failed", "path", r.URL.Path, "err", err)
	problem(w, http.StatusInternalServerError, "internal", "Internal error", what+" failed; the server's log has the cause")
}

// stillAuthenticated checks a stream's credentials again (a session logged
// out or expired, a token removed at a restart): a stream does not outlive
// the right to read it by more than a keep-alive interval.
func (s *Server) stillAuthenticated(st *sse, r *http.Request) bool {
	if _, _, err := s.auth.authenticate(r); err != nil {
		st.event("", "error", map[string]string{"reason": "not logged in any more: " + err.Error()})
		return false
	}
	return true
}

// streamContext ends with the request or with Close.
func (s *Server) streamContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	s.mu.Lock()
	if s.closed {
		cancel()
	} else {
		s.wg.Add(1)
	}
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ctx, cancel
	}
	stop := context.AfterFunc(s.base, cancel)
	return ctx, func() {
		stop()
		cancel()
		s.wg.Done()
	}
}

func intParam(v string, def, lo, hi int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q: want an integer from %d to %d", v, lo, hi)
	}
	return n, nil
}
