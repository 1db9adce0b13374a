package observers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/internal/glob"
	"github.com/noeta-go/noeta/internal/hookspec"
)

// Defaults and limits of the hooks observer.
const (
	DefaultHooksQueueSize = 256
	// HookOutputMax bounds what is kept of a hook's output (stdout and
	// stderr together) for the log; the rest is read and dropped.
	HookOutputMax = 4 << 10
	// WebhookResponseMax bounds what is read of a webhook's response body.
	WebhookResponseMax = 64 << 10
	// DefaultWebhookBackoff is the wait before a webhook's first retry; it
	// doubles (with jitter) up to webhookBackoffMax.
	DefaultWebhookBackoff = time.Second
	// NotificationArgsMax bounds the arguments in a notification's body.
	NotificationArgsMax = 4 << 10
)

const (
	// hookWaitDelay bounds the wait for a killed hook to be reaped.
	hookWaitDelay = 2 * time.Second
	// hookPipeGrace is how long output is still read once the hook's
	// process group is gone, for a process that left the group holding the
	// pipe.
	hookPipeGrace = time.Second
)

// ToolHook is a PostToolUse hook: a command run after every
// ToolCallFinished of a tool its MatchTool matches. It is the type the
// hooks: section of noeta.yaml decodes into, so both are checked by the same
// rules (package internal/hookspec).
type ToolHook = hookspec.ToolHook

// NotificationHook is a Notification hook: a command or a webhook run on
// the events its On names (NotifyOnApproval, …). See [ToolHook].
type NotificationHook = hookspec.NotificationHook

// The events a [NotificationHook] runs on.
const (
	NotifyOnApproval = hookspec.OnApproval
	NotifyOnQuestion = hookspec.OnQuestion
	NotifyOnParked   = hookspec.OnParked
	NotifyOnFailed   = hookspec.OnFailed
)

// DefaultHookTimeout bounds a hook's run when its Timeout is 0.
const DefaultHookTimeout = hookspec.DefaultTimeout

// HooksObserverConfig configures [NewHooks]. NewHooks checks the hooks
// (an error names the field as noeta.yaml writes it,
// hooks.notification[0].url). A PostToolUse hook runs after every ToolCallFinished
// whose tool matches its MatchTool, a glob read exactly as rules' match_tool
// is; a Notification hook runs on the events its On names: approval (an
// ApprovalRequested), question (a yield_for_human suspend), parked (the park
// suspend), failed (a TaskFailed).
type HooksObserverConfig struct {
	PostToolUse  []ToolHook
	Notification []NotificationHook
	// QueueSize bounds the runs waiting for a worker
	// (DefaultHooksQueueSize); a run that finds the queue full is dropped
	// and counted.
	QueueSize int
	// Workers is how many hooks run at once (1).
	Workers int
	// Workspace is the hooks' working directory (the process's if empty).
	Workspace string
	// Env is added to every hook's environment (KEY=VALUE), after the
	// allowlisted variables of the process and before the NOETA_ ones.
	Env []string
	// LookupEnv reads the variables a webhook's headers name (env:NAME),
	// once, in NewHooks (os.LookupEnv if nil).
	LookupEnv func(string) (string, bool)
	// Log, when set, is read for the agent of a task whose TaskCreated this
	// observer did not see, for a notification's body.
	Log eventlog.Reader
	// WebhookBackoff is the wait before a webhook's first retry
	// (DefaultWebhookBackoff).
	WebhookBackoff time.Duration
	Logger         *slog.Logger
}

// HooksStats counts the runs of a Hooks. Queued = Ran + Failed + TimedOut +
// the runs still waiting or running + the runs discarded at Close (counted
// in Dropped with those that found the queue full or came after Close).
type HooksStats struct {
	Queued   uint64 // runs accepted into the queue
	Ran      uint64 // runs that exited with status 0, or webhooks answered 2xx
	Failed   uint64 // runs that could not start, exited non-zero, died of a signal, or were cancelled by Close; webhooks that failed every attempt
	TimedOut uint64 // runs killed at their timeout; webhooks whose last attempt timed out
	Retried  uint64 // webhook attempts made again after a retryable failure
	Dropped  uint64 // runs not accepted (queue full, or after Close), or discarded at Close
	Pending  int    // runs waiting now
	Running  int    // runs running now
}

// Hooks runs the user's PostToolUse and Notification hooks. It is never on
// the emit path: Observe only decides which hooks a record calls for and
// hands them, without waiting, to a bounded queue; background workers run
// the commands as subprocesses and POST the webhooks (deliverWebhook).
//
// A hook run is at least once: a record delivered again (a durable feed
// redelivers after a crash, and nothing here remembers what ran) runs its
// hooks again. A hook that must act once de-duplicates by NOETA_TASK_ID and
// NOETA_SEQ (or NOETA_EVENT_ID), which are the same on every delivery. And
// since in-process delivery drops records when a queue is full, a hook may
// also not run at all: hooks are notifications, never a control path.
//
// Each run gets:
//   - the record as one line of JSON ([RecordJSON]) on stdin;
//   - the workspace as working directory;
//   - an environment of PATH, HOME, LANG, LC_ALL, TERM and TMPDIR from the
//     process (nothing else of it: the engine's credentials stay its own),
//     then HooksObserverConfig.Env, then NOETA_TASK_ID, NOETA_EVENT_TYPE,
//     NOETA_EVENT_ID, NOETA_SEQ, NOETA_TOOL, NOETA_CALL_ID, NOETA_HANDLE and
//     NOETA_NOTIFICATION (the event of a Notification hook; empty when the
//     record has none);
//   - a process group of its own, killed whole at the timeout, and killed
//     when the command exits, so a hook leaves no process behind;
//   - at most HookOutputMax bytes of its output kept, for the log.
type Hooks struct {
	cfg    HooksObserverConfig
	log    *slog.Logger
	dir    string
	post   []postHook
	notify []notifyHook
	base   []string // the environment before the NOETA_ variables
	client *http.Client
	agents agentCache

	mu     sync.RWMutex // guards closed against sends on queue
	closed bool
	queue  chan hookRun

	runCtx    context.Context // cancelled when Close gives up waiting
	cancelRun context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	queued, ran, failed, timedOut, dropped, retried atomic.Uint64
	running                                         atomic.Int64
}

// notifyHook is a Notification hook with its headers resolved.
type notifyHook struct {
	NotificationHook
	headers map[string]string
}

// postHook is a PostToolUse hook with its pattern compiled.
type postHook struct {
	ToolHook
	match glob.Pattern
}

type hookRun struct {
	label   string // "post_tool_use <tool>", "notification approval"
	command []string
	timeout time.Duration
	env     eventlog.Envelope
	tool    string
	callID  string
	handle  string
	// A notification: what it is about, and the webhook it goes to, if
	// it is one.
	event   string
	notice  *Notification
	webhook *notifyHook
}

var _ Observer = (*Hooks)(nil)

// NewHooks validates cfg and starts the workers; Close stops them.
func NewHooks(cfg HooksObserverConfig) (*Hooks, error) {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultHooksQueueSize
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var errs []error
	if err := hookspec.Validate(cfg.PostToolUse, cfg.Notification); err != nil {
		errs = append(errs, err)
	}
	post := make([]postHook, len(cfg.PostToolUse))
	for i, s := range cfg.PostToolUse {
		s.Command = slices.Clone(s.Command)
		if s.Timeout == 0 {
			s.Timeout = DefaultHookTimeout
		}
		post[i] = postHook{ToolHook: s, match: glob.Compile(s.MatchTool)}
	}
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	if cfg.WebhookBackoff <= 0 {
		cfg.WebhookBackoff = DefaultWebhookBackoff
	}
	notify := make([]notifyHook, len(cfg.Notification))
	for i, s := range cfg.Notification {
		s.Command = slices.Clone(s.Command)
		s.On = slices.Clone(s.On)
		if s.Timeout == 0 {
			s.Timeout = DefaultHookTimeout
		}
		headers, err := s.ResolveHeaders(cfg.LookupEnv)
		if err != nil {
			errs = append(errs, fmt.Errorf("hooks.notification[%d].headers: %w", i, err))
		}
		notify[i] = notifyHook{NotificationHook: s, headers: headers}
	}
	for i, kv := range cfg.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("Env[%d] %q is not KEY=VALUE", i, kv))
		}
	}
	dir, err := hookDir(cfg.Workspace)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: hooks: %w", ErrInvalidConfig, err)
	}

	runCtx, cancel := context.WithCancel(context.Background())
	h := &Hooks{
		cfg: cfg, log: cfg.Logger, dir: dir, post: post, notify: notify, base: hookBaseEnv(cfg.Env), client: webhookClient(),
		queue: make(chan hookRun, cfg.QueueSize), runCtx: runCtx, cancelRun: cancel,
	}
	for range cfg.Workers {
		h.wg.Go(h.work)
	}
	return h, nil
}

func hookDir(ws string) (string, error) {
	if ws == "" {
		ws = "."
	}
	dir, err := filepath.Abs(ws)
	if err != nil {
		return "", fmt.Errorf("Workspace: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("Workspace: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("Workspace: %s is not a directory", dir)
	}
	return dir, nil
}

// hookBaseEnv is the allowlisted part of the process's environment, then
// extra.
func hookBaseEnv(extra []string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		} else if k == "PATH" {
			env = append(env, "PATH=/usr/local/bin:/usr/bin:/bin")
		}
	}
	return append(env, extra...)
}

// Name is "hooks".
func (h *Hooks) Name() string { return "hooks" }

// Observe queues the hooks env calls for: each matching PostToolUse hook for
// a ToolCallFinished, each Notification hook whose On names the event env
// is (notificationOf). It never waits: a run that finds the queue full is
// dropped and counted. A payload that cannot be decoded is an error.
func (h *Hooks) Observe(_ context.Context, env eventlog.Envelope) error {
	switch env.Type {
	case noeta.TypeToolCallFinished:
		if len(h.post) == 0 {
			return nil
		}
		var p noeta.ToolCallFinished
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return fmt.Errorf("observers: hooks: decode %s seq %d of task %s: %w", env.Type, env.Seq, env.Task, err)
		}
		for _, s := range h.post {
			if s.match.Match(p.Tool) {
				h.enqueue(hookRun{label: "post_tool_use " + p.Tool, command: s.Command, timeout: s.Timeout, env: env, tool: p.Tool, callID: p.CallID})
			}
		}
	case noeta.TypeTaskCreated:
		if len(h.notify) == 0 {
			return nil
		}
		var p noeta.TaskCreated
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return fmt.Errorf("observers: hooks: decode %s seq %d of task %s: %w", env.Type, env.Seq, env.Task, err)
		}
		h.agents.put(env.Task, p.Agent)
	case noeta.TypeApprovalRequested, noeta.TypeTaskSuspended, noeta.TypeTaskFailed:
		if len(h.notify) == 0 {
			return nil
		}
		event, n, err := notificationOf(env)
		if err != nil {
			return err
		}
		if event == "" {
			return nil
		}
		for i := range h.notify {
			s := &h.notify[i]
			if !slices.Contains(s.On, event) {
				continue
			}
			r := hookRun{label: "notification " + event, command: s.Command, timeout: s.Timeout, env: env,
				tool: n.Tool, callID: n.CallID, handle: n.Handle, event: event, notice: n}
			if s.URL != "" {
				r.webhook = s
				r.label = "webhook " + event
			}
			h.enqueue(r)
		}
	}
	return nil
}

// The reasons of the engine's suspends a notification is about (package
// engine: a yield_for_human question, a park).
const (
	questionReason = "waiting_human"
	parkedReason   = "parked"
)

// notificationOf says which notification event env is, if any, and what a
// person is told of it.
func notificationOf(env eventlog.Envelope) (string, *Notification, error) {
	bad := func(err error) (string, *Notification, error) {
		return "", nil, fmt.Errorf("observers: hooks: decode %s seq %d of task %s: %w", env.Type, env.Seq, env.Task, err)
	}
	n := &Notification{Task: env.Task, Time: env.Time, Seq: env.Seq}
	switch env.Type {
	case noeta.TypeApprovalRequested:
		var p noeta.ApprovalRequested
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return bad(err)
		}
		n.Event, n.Handle, n.Tool, n.CallID, n.Guard, n.Reason = NotifyOnApproval, p.Handle, p.Tool, p.CallID, p.Guard, p.Reason
		n.Action, n.ChildAgent = string(p.Action), p.Agent
		n.Args, n.ArgsCut = cutNoticeArgs(p.Args)
		n.ArgsCut = n.ArgsCut || p.ArgsRef != nil
	case noeta.TypeTaskSuspended:
		var p noeta.TaskSuspended
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return bad(err)
		}
		head, rest, _ := strings.Cut(p.Reason, ":")
		switch head {
		case questionReason:
			n.Event, n.Question = NotifyOnQuestion, strings.TrimSpace(rest)
		case parkedReason:
			n.Event, n.Reason = NotifyOnParked, strings.TrimSpace(rest)
		default:
			return "", nil, nil
		}
		n.Handle = p.WakeOn.Handle
	case noeta.TypeTaskFailed:
		var p noeta.TaskFailed
		if err := json.Unmarshal(env.Payload, &p); err != nil {
			return bad(err)
		}
		n.Event, n.Error, n.Guard = NotifyOnFailed, p.Error, p.Guard
	default:
		return "", nil, nil
	}
	return n.Event, n, nil
}

// Notification is the JSON body a webhook is sent: what happened to which
// task, and what a person needs to act on it. Args are cut to
// NotificationArgsMax (ArgsCut then says so; the log has them whole).
type Notification struct {
	Event      string          `json:"event"` // approval, question, parked, failed
	Task       string          `json:"task"`
	Agent      string          `json:"agent,omitempty"`
	Handle     string          `json:"handle,omitempty"`
	Action     string          `json:"action,omitempty"`
	Tool       string          `json:"tool,omitempty"`
	CallID     string          `json:"call_id,omitempty"`
	ChildAgent string          `json:"child_agent,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	ArgsCut    bool            `json:"args_cut,omitempty"`
	Guard      string          `json:"guard,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Question   string          `json:"question,omitempty"`
	Error      string          `json:"error,omitempty"`
	Time       time.Time       `json:"time"`
	Seq        uint64          `json:"seq"`
}

// cutNoticeArgs keeps args up to NotificationArgsMax; longer ones become a
// JSON string of their first bytes.
func cutNoticeArgs(args json.RawMessage) (json.RawMessage, bool) {
	if len(args) <= NotificationArgsMax {
		return args, false
	}
	s := strings.ToValidUTF8(string(args[:NotificationArgsMax/2]), "")
	b, _ := json.Marshal(s + "…")
	return b, true
}

func (h *Hooks) enqueue(r hookRun) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		h.dropped.Add(1)
		h.log.Warn("hooks: closed; a hook run is dropped", "hook", r.label, "task", r.env.Task, "seq", r.env.Seq)
		return
	}
	select {
	case h.queue <- r:
		h.queued.Add(1)
	default:
		h.dropped.Add(1)
		h.log.Warn("hooks: the queue is full; a hook run is dropped", "hook", r.label, "task", r.env.Task, "seq", r.env.Seq, "queue", cap(h.queue))
	}
}

func (h *Hooks) work() {
	for r := range h.queue {
		if h.runCtx.Err() != nil {
			h.dropped.Add(1) // Close gave up waiting: discard the rest
			continue
		}
		h.running.Add(1)
		h.run(r)
		h.running.Add(-1)
	}
}

// run runs one hook and counts and logs its outcome.
func (h *Hooks) run(r hookRun) {
	if r.webhook != nil {
		h.deliverWebhook(r)
		return
	}
	start := time.Now()
	log := h.log.With("hook", r.label, "command", r.command, "task", r.env.Task, "seq", r.env.Seq, "type", r.env.Type)
	stdin, err := json.Marshal(NewRecordJSON(r.env))
	if err != nil {
		h.failed.Add(1)
		log.Warn("hooks: the record cannot be encoded for the hook", "err", err)
		return
	}
	stdin = append(stdin, '\n')

	ctx, cancel := context.WithTimeout(h.runCtx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.command[0], r.command[1:]...)
	cmd.Dir = h.dir
	cmd.Env = append(append([]string(nil), h.base...),
		"NOETA_TASK_ID="+r.env.Task,
		"NOETA_EVENT_TYPE="+r.env.Type,
		"NOETA_EVENT_ID="+r.env.ID,
		"NOETA_SEQ="+strconv.FormatUint(r.env.Seq, 10),
		"NOETA_TOOL="+r.tool,
		"NOETA_CALL_ID="+r.callID,
		"NOETA_HANDLE="+r.handle,
		"NOETA_NOTIFICATION="+r.event,
	)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return hookKillGroup(cmd.Process.Pid) }
	cmd.WaitDelay = hookWaitDelay

	// Our own pipe rather than an io.Writer in cmd.Stdout: Wait then returns
	// when the command exits, not when the last holder of the pipe does.
	outR, outW, err := os.Pipe()
	if err != nil {
		h.failed.Add(1)
		log.Warn("hooks: cannot make a pipe", "err", err)
		return
	}
	cmd.Stdout, cmd.Stderr = outW, outW
	err = cmd.Start()
	outW.Close()
	if err != nil {
		outR.Close()
		h.failed.Add(1)
		log.Warn("hooks: the hook could not start", "err", err)
		return
	}
	out := &hookOutput{max: HookOutputMax}
	copied := make(chan struct{})
	go func() {
		io.Copy(out, outR)
		close(copied)
	}()
	waitErr := cmd.Wait()
	hookKillGroup(cmd.Process.Pid) // the group outlives the command; end it
	grace := time.AfterFunc(hookPipeGrace, func() { outR.SetReadDeadline(time.Now()) })
	<-copied
	grace.Stop()
	outR.Close()

	ps := cmd.ProcessState
	attrs := []any{"duration", time.Since(start).Round(time.Millisecond), "output", out.text()}
	switch {
	case ps == nil:
		h.failed.Add(1)
		log.Warn("hooks: waiting for the hook failed", append(attrs, "err", waitErr)...)
	case !ps.Exited() && errors.Is(ctx.Err(), context.DeadlineExceeded) && h.runCtx.Err() == nil:
		h.timedOut.Add(1)
		log.Warn("hooks: the hook timed out; its process group was killed", append(attrs, "timeout", r.timeout)...)
	case !ps.Exited() && h.runCtx.Err() != nil:
		h.failed.Add(1)
		log.Warn("hooks: the hook was cancelled by Close; its process group was killed", attrs...)
	case !ps.Success():
		h.failed.Add(1)
		log.Warn("hooks: the hook failed", append(attrs, "status", ps.String())...)
	default:
		h.ran.Add(1)
		log.Debug("hooks: the hook ran", attrs...)
	}
}

// hookKillGroup sends SIGKILL to the process group pgid; a group that is
// already gone is not an error.
func hookKillGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// hookOutput keeps the first max bytes written to it and counts the rest.
type hookOutput struct {
	max   int
	buf   []byte
	total int64
}

func (w *hookOutput) Write(p []byte) (int, error) {
	if room := w.max - len(w.buf); room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	w.total += int64(len(p))
	return len(p), nil
}

// text is the output kept, as valid UTF-8, marked when it was cut.
func (w *hookOutput) text() string {
	s := strings.ToValidUTF8(string(w.buf), "\uFFFD")
	if w.total > int64(len(w.buf)) {
		s += fmt.Sprintf("… (%d bytes in all)", w.total)
	}
	return s
}

// Stats returns the counters.
func (h *Hooks) Stats() HooksStats {
	return HooksStats{
		Queued: h.queued.Load(), Ran: h.ran.Load(), Failed: h.failed.Load(), TimedOut: h.timedOut.Load(),
		Dropped: h.dropped.Load(), Retried: h.retried.Load(), Pending: len(h.queue), Running: int(h.running.Load()),
	}
}

// Close stops taking runs (Observe then drops and counts them) and waits for
// the queued and running ones to finish. When ctx ends first, the running
// hooks are killed, the queued ones discarded (counted as dropped), and Close
// returns ctx's error once the workers are gone. Calling it again waits
// again.
func (h *Hooks) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		close(h.queue)
		h.mu.Unlock()
	})
	done := make(chan struct{})
	go func() {
		h.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		h.cancelRun()
		return nil
	case <-ctx.Done():
	}
	h.cancelRun()
	<-done // bounded: a killed hook is reaped within hookWaitDelay + hookPipeGrace
	return fmt.Errorf("observers: hooks: gave up waiting for the hooks, killed the running ones and discarded the queued ones: %w", ctx.Err())
}
