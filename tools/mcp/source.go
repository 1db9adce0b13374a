package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta/tools"
	"github.com/noeta-go/noeta/tools/sandbox"
)

// Defaults of [Options].
const (
	// DefaultMaxResultBytes caps what one call may return: text, structured
	// content and the sizes of what is summarised.
	DefaultMaxResultBytes = 1 << 20
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	// frameSlack is how much bigger than the result cap a JSON-RPC frame
	// from a stdio server may be before the connection itself is dropped:
	// a result between the two is refused cleanly, naming the cap.
	frameFactor = 4
)

// Errors of a [Source], wrapped with the server's name and detail.
var (
	// ErrClosed: the source was closed.
	ErrClosed = errors.New("mcp: source closed")
	// ErrUnavailable: the server could not be started or reached, or is
	// waiting out its restart backoff.
	ErrUnavailable = errors.New("mcp: server unavailable")
)

// Options tune a [Source]; the zero value is the defaults.
type Options struct {
	// LookupEnv expands ${VAR} in a server's env and headers when it
	// starts; os.LookupEnv when nil.
	LookupEnv func(string) (string, bool)
	// MaxResultBytes caps one call's result; DefaultMaxResultBytes when 0.
	MaxResultBytes int
	// MinBackoff and MaxBackoff bound the wait before a server that failed
	// to start, or died, is started again: doubling from MinBackoff.
	MinBackoff, MaxBackoff time.Duration
	// HTTPTransport carries a url server's requests; http.DefaultTransport
	// when nil.
	HTTPTransport http.RoundTripper
	// Logger gets what the source drops (a tool noeta cannot register); a
	// discarding logger when nil.
	Logger *slog.Logger
	// OnToolsChanged, when set, is called when the server says its tool list
	// changed (notifications/tools/list_changed). It runs on the client's
	// reading goroutine: it must return promptly and not call the Source.
	OnToolsChanged func(server string)
	// Sandbox, when set, starts a stdio server's process confined, under
	// the policy of SandboxScope (a *sandbox.Scoped); a sandbox that is
	// unavailable refuses to start it. Nil starts it unconfined.
	Sandbox      Confiner
	SandboxScope string
	// Workspace is the directory a confined server may write (and its
	// working directory unless the config gives one); the engine's working
	// directory when empty.
	Workspace string
}

// Confiner starts a process confined under the policy of scope.
type Confiner interface {
	Command(ctx context.Context, scope string, spec sandbox.Spec) (*sandbox.Cmd, error)
}

// Source is one configured MCP server as a source of tools. It owns the
// server's lifecycle: started on first use ([Source.Tools] or a call),
// started again, after a backoff, once it has died, and stopped by
// [Source.Close]. All methods are safe for concurrent use.
type Source struct {
	srv    Server
	bad    error // why srv cannot be started: every use returns it
	opts   Options
	client *sdk.Client
	log    *slog.Logger

	// changed counts list_changed notifications; listed is the count the
	// current tool list was fetched after.
	changed atomic.Int64
	// progress is where each call in flight that asked for it is told its
	// progress, by the progress token sent with it (tokens counts them);
	// see progress.go for how it is routed.
	progress sync.Map // string → *progressRoute
	tokens   atomic.Int64

	mu       sync.Mutex
	sess     *session      // the live session; nil when there is none
	starting chan struct{} // closed when the start in flight ends
	lastErr  error         // why the last start failed or the last session ended
	failures int           // starts failed or sessions lost since a call last succeeded
	retryAt  time.Time
	closed   bool
	remote   map[string]*sdk.Tool // the server's tools by their own names
	listed   int64
	hasList  bool

	watchers sync.WaitGroup
}

// session is one connection to the server (and, for stdio, one process).
type session struct {
	cs      *sdk.ClientSession
	proc    *process // nil for a url server
	done    chan struct{}
	err     error       // why it ended; set before done is closed
	closing atomic.Bool // set by Close: let the process exit by itself
	hurry   chan struct{}
	// drop, closed by lost, has the watcher close a url session: closing
	// one may wait on the server (an HTTP DELETE), which a failing call
	// should not.
	drop     chan struct{}
	dropOnce sync.Once
}

// ErrInvalidServer is wrapped by a [Source]'s methods when its [Server]
// cannot be started as given (no Command or URL, both, an empty program).
var ErrInvalidServer = errors.New("mcp: invalid server")

// New returns the source of srv; nothing starts until it is used. A srv
// that cannot be started makes every use fail with [ErrInvalidServer].
func New(srv Server, opts Options) *Source {
	if srv.TimeoutSeconds == 0 {
		srv.TimeoutSeconds = DefaultTimeoutSeconds
	}
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	if opts.MaxResultBytes <= 0 {
		opts.MaxResultBytes = DefaultMaxResultBytes
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{srv: srv, opts: opts, log: opts.Logger.With("mcp_server", srv.Name)}
	if err := srv.check(); err != nil {
		s.bad = fmt.Errorf("%w: %w", ErrInvalidServer, err)
	}
	s.client = sdk.NewClient(&sdk.Implementation{Name: "noeta", Version: "1"}, &sdk.ClientOptions{
		// No roots, sampling or elicitation: a server gets tool calls only.
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			s.changed.Add(1)
			if opts.OnToolsChanged != nil {
				opts.OnToolsChanged(srv.Name)
			}
		},
	})
	return s
}

// Name is the server's name.
func (s *Source) Name() string { return s.srv.Name }

// Tools returns the server's tools as registry tools named
// mcp__<server>__<tool>, starting the server if it is not running and
// fetching the list again if the server said it changed. A tool noeta
// cannot register (a name that does not fit, a schema that does not
// compile) is left out and logged.
func (s *Source) Tools(ctx context.Context) ([]tools.Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.srv.TimeoutSeconds)*time.Second)
	defer cancel()
	sess, err := s.ensure(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.refreshIfChanged(ctx, sess); err != nil {
		return nil, err
	}
	s.mu.Lock()
	names := make([]string, 0, len(s.remote))
	for n := range s.remote {
		names = append(names, n)
	}
	defs := s.remote
	s.mu.Unlock()
	sort.Strings(names)
	out := make([]tools.Tool, 0, len(names))
	for _, n := range names {
		t, err := s.newTool(defs[n])
		if err != nil {
			s.log.Warn("mcp: tool left out", "tool", n, "error", err)
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// Close stops the server: a stdio server has its stdin closed and until
// ctx ends to exit, then its process group is killed. Calls in flight
// fail. Close waits for everything the source started.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	sess, starting := s.sess, s.starting
	s.sess = nil
	s.mu.Unlock()
	if starting != nil {
		select {
		case <-starting: // the starter sees closed and stops what it started
		case <-ctx.Done():
			<-starting // a start is bounded by the server's timeout
		}
	}
	if sess != nil {
		sess.stop(ctx)
	}
	s.watchers.Wait()
	return nil
}

// stop ends the session, letting a stdio process exit by itself until ctx
// ends.
func (sess *session) stop(ctx context.Context) {
	sess.closing.Store(true)
	_ = sess.cs.Close()
	select {
	case <-sess.done:
	case <-ctx.Done():
		close(sess.hurry)
		<-sess.done
	}
}

// abort ends the session at once, killing a stdio process.
func (sess *session) abort() {
	_ = sess.cs.Close()
	<-sess.done
}

// where is the server's URL for errors, without its query or fragment
// (which may carry a token).
func (s *Source) where() string {
	u, err := url.Parse(s.srv.URL)
	if err != nil {
		return "the configured url"
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String()
}

// ensure returns the live session, starting one if there is none.
func (s *Source) ensure(ctx context.Context) (*session, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", ErrClosed, s.srv.Name)
		}
		if s.sess != nil {
			sess := s.sess
			s.mu.Unlock()
			return sess, nil
		}
		if ch := s.starting; ch != nil {
			s.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("mcp server %q: waiting for it to start: %w", s.srv.Name, ctx.Err())
			}
		}
		if wait := time.Until(s.retryAt); wait > 0 {
			last := s.lastErr
			s.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return nil, unavailable("mcp server %q is waiting to restart (%v): %w", s.srv.Name, last, ctx.Err())
			}
		}
		starting := make(chan struct{})
		s.starting = starting
		s.mu.Unlock()

		sess, err := s.start(ctx)

		s.mu.Lock()
		close(starting)
		s.starting = nil
		if err != nil {
			if ctx.Err() == nil {
				// The server's failure, not a caller giving up.
				s.failedLocked(err)
			}
			s.mu.Unlock()
			return nil, err
		}
		if s.closed {
			s.mu.Unlock()
			sess.abort()
			return nil, fmt.Errorf("%w: %s", ErrClosed, s.srv.Name)
		}
		s.sess = sess
		s.mu.Unlock()
		return sess, nil
	}
}

// failedLocked records a failed start or a lost session and sets the
// backoff before the next start.
func (s *Source) failedLocked(err error) {
	s.lastErr = err
	s.failures++
	d := s.opts.MinBackoff
	for i := 1; i < s.failures && d < s.opts.MaxBackoff; i++ {
		d *= 2
	}
	s.retryAt = time.Now().Add(min(d, s.opts.MaxBackoff))
}

// succeeded resets the backoff: the server has served a call.
func (s *Source) succeeded() {
	s.mu.Lock()
	s.failures = 0
	s.mu.Unlock()
}

// start starts the server, initializes the session and fetches the tool
// list, all within the server's timeout.
func (s *Source) start(ctx context.Context) (*session, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.srv.TimeoutSeconds)*time.Second)
	defer cancel()
	sess := &session{done: make(chan struct{}), hurry: make(chan struct{}), drop: make(chan struct{})}
	var transport sdk.Transport
	if s.srv.Stdio() {
		env, err := s.srv.ExpandEnv(s.opts.LookupEnv)
		if err != nil {
			return nil, unavailable("%w", err)
		}
		environ := inheritedEnv()
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
		p, err := startProcess(s.srv.Command, environ, s.srv.Cwd, s.opts.Sandbox, s.opts.SandboxScope, s.opts.Workspace)
		if err != nil {
			return nil, unavailable("mcp server %q: start %q: %w", s.srv.Name, s.srv.Command[0], err)
		}
		sess.proc = p
		transport = progressTransport{
			Transport: &sdk.IOTransport{Reader: p.stdout, Writer: p.stdin, MaxLineLength: frameFactor * s.opts.MaxResultBytes},
			src:       s,
		}
	} else {
		headers, err := s.srv.ExpandHeaders(s.opts.LookupEnv)
		if err != nil {
			return nil, unavailable("%w", err)
		}
		base := s.opts.HTTPTransport
		if base == nil {
			base = http.DefaultTransport
		}
		transport = &sdk.StreamableClientTransport{
			Endpoint:   s.srv.URL,
			HTTPClient: &http.Client{Transport: httpTransport{base: base, headers: headers, limit: frameFactor * s.opts.MaxResultBytes, src: s}},
			// The bound of a stdio server's frames, for events.
			MaxEventSize: frameFactor * s.opts.MaxResultBytes,
		}
	}
	cs, err := s.client.Connect(ctx, transport, nil)
	if err != nil {
		return nil, s.startFailed(sess, "did not initialize", err)
	}
	sess.cs = cs
	s.watchers.Add(1)
	go s.watch(sess)
	if err := s.refresh(ctx, sess); err != nil {
		sess.abort()
		if sess.proc == nil {
			return nil, unavailable("mcp server %q (%s) did not list its tools: %v", s.srv.Name, s.where(), err)
		}
		return nil, unavailable("mcp server %q did not list its tools: %v (%s)", s.srv.Name, err, sess.proc.describe())
	}
	return sess, nil
}

// startFailed kills what start started and describes why it failed.
func (s *Source) startFailed(sess *session, what string, err error) error {
	if sess.proc == nil {
		return unavailable("mcp server %q (%s) %s: %v", s.srv.Name, s.where(), what, err)
	}
	sess.proc.kill()
	return unavailable("mcp server %q %s: %v (%s)", s.srv.Name, what, err, sess.proc.describe())
}

// watch waits for the session to end, however it ends (the process exits,
// the connection breaks, garbage arrives, Close), then kills what is left
// and records why.
func (s *Source) watch(sess *session) {
	defer s.watchers.Done()
	connDone := make(chan error, 1)
	go func() { connDone <- sess.cs.Wait() }() // ends once the connection is closed, below at the latest
	var exited <-chan struct{}
	if sess.proc != nil {
		exited = sess.proc.exited
	}
	var why error
	select {
	case why = <-connDone:
		_ = sess.cs.Close()
	case <-exited:
		_ = sess.cs.Close()
		<-connDone
	case <-sess.drop:
		_ = sess.cs.Close()
		<-connDone
	}
	if sess.proc != nil {
		if sess.closing.Load() {
			select {
			case <-sess.proc.exited:
			case <-sess.hurry:
			}
		}
		sess.proc.kill()
	}
	switch {
	case sess.closing.Load():
		sess.err = fmt.Errorf("%w: %s", ErrClosed, s.srv.Name)
	case sess.proc != nil:
		sess.err = unavailable("mcp server %q stopped: %s", s.srv.Name, describeEnd(why, sess.proc))
	default:
		sess.err = unavailable("mcp server %q (%s): connection lost", s.srv.Name, s.where())
		if why != nil && !errors.Is(why, sdk.ErrConnectionClosed) {
			sess.err = unavailable("mcp server %q (%s): connection lost: %v", s.srv.Name, s.where(), why)
		}
	}
	// Unhook it before done is closed, so that ensure never hands out a
	// session that has ended.
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
		s.failedLocked(sess.err)
	}
	s.mu.Unlock()
	close(sess.done)
	if !sess.closing.Load() {
		s.log.Warn("mcp: server session ended", "error", sess.err)
	}
}

func describeEnd(connErr error, p *process) string {
	d := p.describe()
	if connErr != nil && !errors.Is(connErr, sdk.ErrConnectionClosed) {
		d = fmt.Sprintf("connection: %v; %s", connErr, d)
	}
	return d
}

// ended reports whether the session has ended.
func (sess *session) ended() bool {
	select {
	case <-sess.done:
		return true
	default:
		return false
	}
}

// lost ends a session whose connection failed under a call (callErr), so
// that the next use starts a new one. For a stdio server it waits for the
// process to be gone, and says how it ended; a url server's session is
// unhooked at once and closed by its watcher.
func (s *Source) lost(ctx context.Context, sess *session, callErr error) error {
	if sess.proc != nil {
		_ = sess.cs.Close()
		select {
		case <-sess.done:
			return sess.err
		case <-ctx.Done():
			return unavailable("mcp server %q: connection lost", s.srv.Name)
		}
	}
	err := unavailable("mcp server %q (%s): connection lost: %v", s.srv.Name, s.where(), callErr)
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
		s.failedLocked(err)
	}
	s.mu.Unlock()
	sess.dropOnce.Do(func() { close(sess.drop) })
	return err
}

// refresh fetches the server's tool list.
func (s *Source) refresh(ctx context.Context, sess *session) error {
	gen := s.changed.Load()
	var defs []*sdk.Tool
	for t, err := range sess.cs.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("mcp server %q: tools/list: %w", s.srv.Name, err)
		}
		defs = append(defs, t)
	}
	list, err := toolsByName(s.srv.Name, defs)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.remote, s.listed, s.hasList = list, gen, true
	s.mu.Unlock()
	return nil
}

// ErrToolNames: a server listed tool names that cannot be told apart.
var ErrToolNames = errors.New("mcp: tool names that cannot be told apart")

// toolsByName indexes a server's tool list by name, refusing the whole
// list when a name is empty or two names differ only in case (or not at
// all): a rule or an override written for one would not be the rule of
// the other, and which definition a call reached would depend on the
// order the server listed them in. Before, a later definition silently
// replaced an earlier one of the same name.
func toolsByName(server string, defs []*sdk.Tool) (map[string]*sdk.Tool, error) {
	list := make(map[string]*sdk.Tool, len(defs))
	folded := make(map[string]string, len(defs))
	var bad []string
	for _, t := range defs {
		if t == nil || t.Name == "" {
			bad = append(bad, `"" (empty)`)
			continue
		}
		key := strings.ToLower(t.Name)
		if prev, ok := folded[key]; ok {
			bad = append(bad, fmt.Sprintf("%q and %q", prev, t.Name))
			continue
		}
		folded[key] = t.Name
		list[t.Name] = t
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w: mcp server %q listed %s; none of its tools is used until it lists names that differ in more than case",
			ErrToolNames, server, strings.Join(bad, ", "))
	}
	return list, nil
}

func (s *Source) refreshIfChanged(ctx context.Context, sess *session) error {
	s.mu.Lock()
	stale := !s.hasList || s.listed != s.changed.Load()
	s.mu.Unlock()
	if !stale {
		return nil
	}
	return s.refresh(ctx, sess)
}

// lookup returns the server's current definition of a tool.
func (s *Source) lookup(name string) (*sdk.Tool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.remote[name]
	return t, ok
}

// serverError reports an error the server sent in reply (a JSON-RPC error
// response), as opposed to a connection that failed: the SDK's own codes
// for a closing connection (-32003, -32004) and for a request its transport
// could not deliver (-32005: an HTTP POST that failed) are not the server's.
func serverError(err error) bool {
	var we *jsonrpc.Error
	return errors.As(err, &we) && (we.Code < -32005 || we.Code > -32003)
}

// inheritEnv is what a stdio server inherits of the engine's environment,
// the set the reference SDK's stdio client passes: enough to find programs
// and a home directory (npx needs both), and none of the engine's secrets
// (a model provider's API key, a NATS credential). Anything else a server
// needs is given in its env, ${VAR} expanded.
var inheritEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR"}

func inheritedEnv() []string {
	var out []string
	for _, k := range inheritEnv {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// unavailable is an error that wraps [ErrUnavailable] (and any %w of
// format) without saying so in its text: the text is for the model and
// the operator, and names the server already.
func unavailable(format string, args ...any) error {
	return unavailableError{fmt.Errorf(format, args...)}
}

type unavailableError struct{ err error }

func (e unavailableError) Error() string   { return e.err.Error() }
func (e unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// httpTransport adds a url server's configured headers to each request,
// bounds a JSON response body, which the SDK reads whole, and routes the
// progress in an event stream as it is read (see sseProgress).
type httpTransport struct {
	base    http.RoundTripper
	headers map[string]string
	limit   int
	src     *Source
}

func (h httpTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range h.headers {
			r.Header.Set(k, v)
		}
	}
	resp, err := h.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	// The media type as the SDK reads it (mime.ParseMediaType: any case).
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "application/json":
		resp.Body = &limitedBody{rc: resp.Body, left: int64(h.limit)}
	case "text/event-stream":
		if h.src != nil {
			resp.Body = &sseProgress{rc: resp.Body, src: h.src}
		}
	}
	return resp, err
}

// ErrResponseTooLarge: a url server's response body is over the bound.
var ErrResponseTooLarge = errors.New("mcp: response body too large")

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrResponseTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, ErrResponseTooLarge
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
