package observers

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// ErrInvalidConfig is wrapped by [NewChildLifecycle] for a config it cannot
// run with, and by [ChildLifecycle.Recover] when there is no index to scan.
var ErrInvalidConfig = errors.New("observers: invalid config")

// DefaultChildLifecycleActor is the Actor of the inbox records a
// [ChildLifecycle] writes when its config names none.
const DefaultChildLifecycleActor = "child_lifecycle"

// InboxKeyPrefix starts the inbox key of a child's handoff: subtask-<child>.
const InboxKeyPrefix = "subtask-"

// rememberMax bounds the per-process memories (lineages seen, wakes sent).
// Both only save work: forgetting an entry costs a read or a duplicate wake,
// which the dispatcher absorbs, never a lost or a wrong handoff.
const rememberMax = 4096

// ChildLog is what [ChildLifecycle] needs from the event log: reading any
// task, and the lease-free inbox write. It holds no lease, so it cannot append
// to a log.
type ChildLog interface {
	eventlog.Reader
	SystemEmit(ctx context.Context, task, key string, env eventlog.Envelope) (eventlog.Envelope, error)
}

// Waker delivers a wake event to a task; eventlog.Dispatcher implements it.
type Waker interface {
	Wake(ctx context.Context, task string, event noeta.Wake) (bool, error)
}

// ChildLifecycleConfig configures a [ChildLifecycle].
type ChildLifecycleConfig struct {
	Log ChildLog // required
	// Index enumerates tasks for [ChildLifecycle.Recover]; without it Recover
	// fails and Handle works as usual.
	Index  eventlog.TaskIndex
	Waker  Waker        // required
	Actor  string       // DefaultChildLifecycleActor if empty
	Logger *slog.Logger // slog.Default() if nil
}

// ChildLifecycle hands a finished child's outcome to its parent and wakes the
// parent. Every decision is taken from the logs and the parent's inbox, never
// from what the process remembers, so any number of instances and restarts
// converge: the inbox key makes the write happen once, and a repeated wake is
// buffered harmlessly by the dispatcher. It is safe for concurrent use.
type ChildLifecycle struct {
	log    ChildLog
	index  eventlog.TaskIndex
	waker  Waker
	actor  string
	logger *slog.Logger

	// lineages saves reading a child's log for its TaskCreated when this
	// process saw the creation.
	lineages *lru[lineage]
	// woken keeps most duplicate wakes off the dispatcher when several
	// members of a group (or several passes) reach the same conclusion.
	woken *lru[struct{}]
	// retryPauses are the pauses before a failed handoff is tried again,
	// and retryBudget bounds a delivery's tries and pauses together.
	retryPauses []time.Duration
	retryBudget time.Duration
}

// handoffRetryPauses: 0.25 s doubling to 2 s, 3.75 s in all; with the tries
// themselves, a delivery's handoff takes at most handoffRetryBudget.
var handoffRetryPauses = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}

const handoffRetryBudget = 8 * time.Second

// NewChildLifecycle checks cfg and returns the observer. Attach it with
// Subscriber.Subscribe(c.Handle), then recover what was missed: Recover
// once, or RecoverTasks through a Dispatcher's AwaitingSubtasks.
func NewChildLifecycle(cfg ChildLifecycleConfig) (*ChildLifecycle, error) {
	if cfg.Log == nil {
		return nil, fmt.Errorf("%w: ChildLifecycleConfig.Log is nil", ErrInvalidConfig)
	}
	if cfg.Waker == nil {
		return nil, fmt.Errorf("%w: ChildLifecycleConfig.Waker is nil", ErrInvalidConfig)
	}
	if cfg.Actor == "" {
		cfg.Actor = DefaultChildLifecycleActor
	}
	if len(cfg.Actor) > eventlog.MaxActorLen {
		return nil, fmt.Errorf("%w: ChildLifecycleConfig.Actor is %d bytes, the limit is %d", ErrInvalidConfig, len(cfg.Actor), eventlog.MaxActorLen)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &ChildLifecycle{
		log:      cfg.Log,
		index:    cfg.Index,
		waker:    cfg.Waker,
		actor:    cfg.Actor,
		logger:   cfg.Logger.With("observer", "child_lifecycle"),
		lineages: newLRU[lineage](rememberMax),
		woken:    newLRU[struct{}](rememberMax),

		retryPauses: handoffRetryPauses,
		retryBudget: handoffRetryBudget,
	}, nil
}

// Handle is an eventlog.Handler. It acts on the terminal log record of a task
// that has a parent and ignores everything else; inbox records (its own
// handoffs, re-entering through the subscriber) return at once. A handoff
// that fails is tried again a few times over about 4 s, all of it within
// 8 s. An error is a failure to reach the log or the dispatcher that
// outlasted them, logged here as well because a subscriber only counts it;
// the handoff is redone by the next Recover.
func (c *ChildLifecycle) Handle(ctx context.Context, env eventlog.Envelope) error {
	if env.Seq == 0 {
		return nil
	}
	if env.Seq == 1 && env.Type == noeta.TypeTaskCreated {
		if lin, ok := c.parseLineage(env); ok {
			c.lineages.put(env.Task, lin)
		}
		return nil
	}
	if !noeta.IsTerminalType(env.Type) {
		return nil
	}
	// A failure here is the store between leader elections, most often:
	// tried again a few times over a few seconds, it is most often over.
	// Left to the reconcile pass, which redoes the handoffs a waiting parent
	// lacks, group wakes came 10-59 s late in the partition run. The tries
	// hold the writer that committed the terminal record (its records are
	// written; its release waits), so all of them together are bounded:
	// a subscriber's ctx is not cancelled with the writer's.
	ctx, cancel := context.WithTimeout(ctx, c.retryBudget)
	defer cancel()
	once := func() error {
		lin, ok, err := c.lineageOf(ctx, env.Task)
		if err != nil || !ok {
			return err
		}
		_, err = c.handoff(ctx, env, lin)
		return err
	}
	err := once()
	for _, pause := range c.retryPauses {
		if err == nil || ctx.Err() != nil {
			break
		}
		c.logger.Warn("child handoff failed; trying again", "task", env.Task, "in", pause, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
		case <-t.C:
			err = once()
		}
		t.Stop()
	}
	return c.logged(err, env.Task)
}

// Recover hands off every ended child whose handoff may have been missed
// while no observer was subscribed, and returns how many inbox records and
// wakes it delivered. Run it once at start, after subscribing, so that no
// terminal record falls between the two. It goes on past a task it cannot
// handle and returns the errors joined. It lists every task and reads each
// log, so its cost grows with the store: where a jetstream Dispatcher
// reconciles, its RecoverAwaiting with [ChildLifecycle.RecoverTasks] as
// AwaitingSubtasks reads only the subtasks parents wait on (the host does
// that).
func (c *ChildLifecycle) Recover(ctx context.Context) (int, error) {
	if c.index == nil {
		return 0, fmt.Errorf("%w: Recover needs ChildLifecycleConfig.Index", ErrInvalidConfig)
	}
	tasks, err := c.index.Tasks(ctx)
	if err != nil {
		return 0, fmt.Errorf("observers: child lifecycle recovery: list tasks: %w", err)
	}
	delivered := 0
	var errs []error
	for _, ts := range tasks {
		if err := ctx.Err(); err != nil {
			return delivered, err
		}
		n, err := c.recoverTask(ctx, ts.Task)
		delivered += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return delivered, errors.Join(errs...)
}

// RecoverTasks is Recover for the given tasks only: each one that has ended
// and has a parent is handed to it again (a no-op where the handoff was
// made) and the parent woken. The dispatcher's reconciler calls it for the
// subtasks a parent has waited on for a while (jetstream's
// DispatcherConfig.AwaitingSubtasks), so a handoff lost with the process
// that should have made it does not wait for some process's restart.
func (c *ChildLifecycle) RecoverTasks(ctx context.Context, tasks []string) (int, error) {
	delivered := 0
	var errs []error
	for _, task := range tasks {
		if err := ctx.Err(); err != nil {
			return delivered, err
		}
		n, err := c.recoverTask(ctx, task)
		delivered += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return delivered, errors.Join(errs...)
}

func (c *ChildLifecycle) recoverTask(ctx context.Context, task string) (int, error) {
	envs, err := c.log.Read(ctx, task, 0)
	if errors.Is(err, eventlog.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("observers: child lifecycle recovery: read task %s: %w", task, err)
	}
	if len(envs) == 0 || envs[0].Type != noeta.TypeTaskCreated {
		c.logger.Error("task log does not start with TaskCreated; skipped", "task", task)
		return 0, nil
	}
	lin, ok := c.parseLineage(envs[0])
	if !ok || lin.parent == "" {
		return 0, nil
	}
	// The first terminal decides, as it does for the inbox key: a later one
	// (which the engine never writes) would find the key taken anyway.
	i := slices.IndexFunc(envs, func(e eventlog.Envelope) bool { return noeta.IsTerminalType(e.Type) })
	if i < 0 {
		return 0, nil
	}
	return c.handoff(ctx, envs[i], lin)
}

// lineage is what a child's TaskCreated says about where it belongs.
type lineage struct {
	parent, group, root string
}

func (c *ChildLifecycle) parseLineage(env eventlog.Envelope) (lineage, bool) {
	var tc noeta.TaskCreated
	if !c.decode(env, &tc) {
		return lineage{}, false
	}
	return lineage{parent: tc.ParentTaskID, group: tc.GroupID, root: tc.RootTaskID}, true
}

// lineageOf finds child's lineage; ok is false when the child cannot be
// handled (already logged).
func (c *ChildLifecycle) lineageOf(ctx context.Context, child string) (lineage, bool, error) {
	// A task ends once, so the entry has done its job; a stray second
	// terminal reads the log again.
	if lin, ok := c.lineages.take(child); ok {
		return lin, true, nil
	}
	envs, err := c.log.Read(ctx, child, 0)
	if errors.Is(err, eventlog.ErrNotFound) {
		c.logger.Warn("terminal record of a task the log does not know; skipped", "task", child)
		return lineage{}, false, nil
	}
	if err != nil {
		return lineage{}, false, fmt.Errorf("observers: read TaskCreated of %s: %w", child, err)
	}
	if len(envs) == 0 || envs[0].Type != noeta.TypeTaskCreated {
		c.logger.Error("task log does not start with TaskCreated; skipped", "task", child)
		return lineage{}, false, nil
	}
	lin, ok := c.parseLineage(envs[0])
	return lin, ok, nil
}

// handoff writes child's outcome into the parent's inbox and wakes the parent.
// It returns how many of the two it delivered.
func (c *ChildLifecycle) handoff(ctx context.Context, term eventlog.Envelope, lin lineage) (int, error) {
	if lin.parent == "" {
		return 0, nil
	}
	child := term.Task
	res, ok := c.outcome(term, lin)
	if !ok {
		return 0, nil
	}
	env, err := eventlog.NewEnvelope(lin.parent, eventlog.OriginObserver, c.actor, res)
	if err != nil {
		c.logger.Error("cannot encode SubtaskCompleted; skipped", "child", child, "parent", lin.parent, "err", err)
		return 0, nil
	}
	env.CausationID = term.ID
	env.CorrelationID = lin.root
	if env.CorrelationID == "" {
		env.CorrelationID = term.CorrelationID
	}

	delivered := 0
	_, err = c.log.SystemEmit(ctx, lin.parent, InboxKeyPrefix+child, env)
	switch {
	case err == nil:
		delivered++
	case errors.Is(err, eventlog.ErrAlreadyExists):
		// Handed off before, maybe by a process that stopped before its
		// wake: go on and wake.
	case errors.Is(err, eventlog.ErrNotFound):
		c.logger.Warn("parent task does not exist; handoff dropped", "child", child, "parent", lin.parent)
		return 0, nil
	case errors.Is(err, eventlog.ErrInvalidArgument):
		c.logger.Error("handoff refused as malformed; skipped", "child", child, "parent", lin.parent, "err", err)
		return 0, nil
	default:
		return 0, fmt.Errorf("observers: hand off child %s to parent %s: %w", child, lin.parent, err)
	}

	n, err := c.wakeParent(ctx, child, lin)
	return delivered + n, err
}

// outcome turns a terminal record into the parent's SubtaskCompleted; ok is
// false for a record that cannot be decoded (already logged).
func (c *ChildLifecycle) outcome(term eventlog.Envelope, lin lineage) (noeta.SubtaskCompleted, bool) {
	res := noeta.SubtaskCompleted{SubtaskID: term.Task, GroupID: lin.group}
	switch term.Type {
	case noeta.TypeTaskCompleted:
		var t noeta.TaskCompleted
		if !c.decode(term, &t) {
			return res, false
		}
		res.Status = noeta.SubtaskStatusCompleted
		if t.AnswerRef != nil {
			ref := *t.AnswerRef
			res.ResultRef = &ref
		} else {
			res.Result = t.Answer
		}
	case noeta.TypeTaskFailed:
		var t noeta.TaskFailed
		if !c.decode(term, &t) {
			return res, false
		}
		res.Status = noeta.SubtaskStatusFailed
		res.Error = t.Error
	case noeta.TypeTaskCancelled:
		var t noeta.TaskCancelled
		if !c.decode(term, &t) {
			return res, false
		}
		res.Status = noeta.SubtaskStatusCancelled
		res.Error = "cancelled"
		if t.Reason != "" {
			res.Error = "cancelled: " + t.Reason
		}
	default:
		return res, false
	}
	fitError(&res)
	return res, true
}

// fitError shortens an error message that would take the record over the
// payload cap. The child's record was under the cap, but the handoff adds
// fields around the same text, and a refused handoff would leave the parent
// waiting forever.
func fitError(res *noeta.SubtaskCompleted) {
	const marker = "…"
	for range 4 {
		b, err := noeta.Canonical(*res)
		if err != nil || len(b) <= noeta.PayloadMaxBytes || res.Error == "" {
			return
		}
		// Escaping can make a byte of text cost up to six in JSON, so cut
		// generously and re-measure.
		over := len(b) - noeta.PayloadMaxBytes + len(marker) + 16
		keep := max(len(res.Error)-over, 0)
		for keep > 0 && !utf8.RuneStart(res.Error[keep]) {
			keep--
		}
		res.Error = res.Error[:keep] + marker
	}
}

// wakeParent wakes the parent for child, unless the parent has already
// consumed the result or ended. For a group member it wakes only once every
// member's handoff is in the parent's inbox.
func (c *ChildLifecycle) wakeParent(ctx context.Context, child string, lin lineage) (int, error) {
	plog, err := c.log.Read(ctx, lin.parent, 0)
	if errors.Is(err, eventlog.ErrNotFound) {
		c.logger.Warn("parent task does not exist; no wake", "child", child, "parent", lin.parent)
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("observers: read parent %s of %s: %w", lin.parent, child, err)
	}
	pv := c.scanParent(plog, lin.group)
	if pv.terminal {
		return 0, nil
	}

	if lin.group == "" {
		if pv.recorded[child] {
			return 0, nil
		}
		return c.wake(ctx, lin.parent, "subtask:"+child, noeta.SubtaskCompletedWake(child))
	}

	if !slices.Contains(pv.members, child) {
		// The engine spawns every member in the parent's log before creating
		// any child, so this is an inconsistent log or a stale read: leave
		// it to the next pass rather than wake on a guess.
		return 0, fmt.Errorf("observers: child %s of group %s is not among the SubtaskSpawned records of parent %s", child, lin.group, lin.parent)
	}
	if allIn(pv.members, pv.recorded) {
		return 0, nil
	}
	// Read after this child's own inbox write: of several members ending at
	// once, the one whose write landed last sees every write.
	inbox, err := c.log.Inbox(ctx, lin.parent)
	if err != nil {
		return 0, fmt.Errorf("observers: read inbox of parent %s of %s: %w", lin.parent, child, err)
	}
	if !allIn(pv.members, c.arrived(inbox, lin.group)) {
		return 0, nil
	}
	return c.wake(ctx, lin.parent, "group:"+lin.group, noeta.GroupCompletedWake(lin.group, pv.members))
}

// parentView is what the parent's log says about handing off to it.
type parentView struct {
	terminal bool
	// recorded holds the subtasks whose result the parent has recorded, so
	// whose wake it has consumed.
	recorded map[string]bool
	// members of the group asked about, in spawn order, without repeats.
	members []string
}

func (c *ChildLifecycle) scanParent(envs []eventlog.Envelope, group string) parentView {
	pv := parentView{recorded: map[string]bool{}}
	for _, e := range envs {
		switch {
		case noeta.IsTerminalType(e.Type):
			pv.terminal = true
		case e.Type == noeta.TypeSubtaskResultRecorded:
			var r noeta.SubtaskResultRecorded
			if c.decode(e, &r) {
				pv.recorded[r.SubtaskID] = true
			}
		case group != "" && e.Type == noeta.TypeSubtaskSpawned:
			var s noeta.SubtaskSpawned
			if c.decode(e, &s) && s.GroupID == group && !slices.Contains(pv.members, s.SubtaskID) {
				pv.members = append(pv.members, s.SubtaskID)
			}
		}
	}
	return pv
}

// arrived returns the subtasks of group whose handoff is in the inbox. Only
// members count (allIn checks against the member list), and a set cannot
// count one member twice, so neither a stray nor a duplicate completion pads
// the barrier.
func (c *ChildLifecycle) arrived(inbox []eventlog.Envelope, group string) map[string]bool {
	got := map[string]bool{}
	for _, e := range inbox {
		if e.Type != noeta.TypeSubtaskCompleted {
			continue
		}
		var sc noeta.SubtaskCompleted
		if c.decode(e, &sc) && sc.GroupID == group {
			got[sc.SubtaskID] = true
		}
	}
	return got
}

// decode unmarshals e's payload into p and logs a record that does not
// decode, so the caller can skip it.
func (c *ChildLifecycle) decode(e eventlog.Envelope, p noeta.Payload) bool {
	if err := json.Unmarshal(e.Payload, p); err != nil {
		c.logger.Error("malformed record; skipped", "task", e.Task, "seq", e.Seq, "key", e.Key, "type", e.Type, "err", err)
		return false
	}
	return true
}

func allIn(members []string, set map[string]bool) bool {
	for _, m := range members {
		if !set[m] {
			return false
		}
	}
	return len(members) > 0
}

// wake delivers w to parent unless this process already did. A wake the
// dispatcher refused is forgotten, so a later pass tries again.
func (c *ChildLifecycle) wake(ctx context.Context, parent, what string, w noeta.Wake) (int, error) {
	key := parent + "\x00" + what
	if !c.woken.add(key, struct{}{}) {
		return 0, nil
	}
	_, err := c.waker.Wake(ctx, parent, w)
	if err == nil {
		return 1, nil
	}
	c.woken.remove(key)
	if errors.Is(err, eventlog.ErrNotFound) {
		c.logger.Warn("parent unknown to the dispatcher; no wake", "parent", parent, "wake", what)
		return 0, nil
	}
	return 0, fmt.Errorf("observers: wake parent %s (%s): %w", parent, what, err)
}

func (c *ChildLifecycle) logged(err error, task string) error {
	if err != nil {
		c.logger.Error("child handoff failed; the next recovery pass retries it", "task", task, "err", err)
	}
	return err
}

// lru is a small bounded map that forgets the least recently added or used
// entry first.
type lru[V any] struct {
	mu  sync.Mutex
	max int
	ll  *list.List
	m   map[string]*list.Element
}

type lruEntry[V any] struct {
	key string
	val V
}

func newLRU[V any](max int) *lru[V] {
	return &lru[V]{max: max, ll: list.New(), m: map[string]*list.Element{}}
}

// put sets key to val.
func (c *lru[V]) put(key string, val V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[key]; ok {
		el.Value.(*lruEntry[V]).val = val
		c.ll.MoveToFront(el)
		return
	}
	c.insert(key, val)
}

// add sets key to val if it is absent, and reports whether it was.
func (c *lru[V]) add(key string, val V) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[key]; ok {
		c.ll.MoveToFront(el)
		return false
	}
	c.insert(key, val)
	return true
}

func (c *lru[V]) insert(key string, val V) {
	c.m[key] = c.ll.PushFront(&lruEntry[V]{key: key, val: val})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.m, old.Value.(*lruEntry[V]).key)
	}
}

// take removes key and returns its value.
func (c *lru[V]) take(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.Remove(el)
	delete(c.m, key)
	return el.Value.(*lruEntry[V]).val, true
}

func (c *lru[V]) remove(key string) { c.take(key) }

func (c *lru[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

// Name implements Observer: the consumer group of an observer-worker's
// ChildLifecycle is obs-child.
func (c *ChildLifecycle) Name() string { return "child" }

// Observe implements Observer; it is Handle.
func (c *ChildLifecycle) Observe(ctx context.Context, env eventlog.Envelope) error {
	return c.Handle(ctx, env)
}
