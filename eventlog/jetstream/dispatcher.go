package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Dispatcher defaults, as in the reference dispatcher (and memlog).
const (
	DefaultLeaseTTL        = 30 * time.Second
	DefaultHeartbeatMax    = 360
	DefaultReclaimMax      = 3
	DefaultMaxFailAttempts = 3
	// DefaultWakeMaxAge is how long the wake stream keeps an ingress message
	// (and the timers stream a fired copy). Messages are applied within
	// moments of arriving and then leave the wake stream (a work queue); the
	// age only bounds how long a wake survives while no Dispatcher runs at
	// all, or while held for a full buffer. Timer schedules are exempt (they
	// carry Nats-TTL: never), so a timer may lie further ahead than this.
	DefaultWakeMaxAge = 7 * 24 * time.Hour
	// DefaultSweepInterval is how often every Dispatcher reconciles on its
	// own (see DispatcherConfig.SweepInterval and reconcile.go): short, so a
	// task never waits long for a signal or a requeue lost to a crash or a
	// failover; a pass reads the rows written since the pass before, the
	// lease keys and the signals in bulk, so it stays cheap.
	DefaultSweepInterval = 15 * time.Second
)

// defaultSweepInterval is the reconcile period of a Dispatcher whose
// config leaves it zero: half the lease TTL, between 1s and
// DefaultSweepInterval. A fixed 15s left a deployment with a short TTL
// waiting up to two passes (with jitter, 37s) for a repair, a parent's lost
// group handoff above all, against a lease reclaimed within a TTL (found by
// the partition run, deploy/nats TestPartition, with a 3s TTL).
func defaultSweepInterval(leaseTTL time.Duration) time.Duration {
	return min(DefaultSweepInterval, max(time.Second, leaseTTL/2))
}

// DispatcherConfig configures a Dispatcher. Zero values take the defaults.
// Every process dispatching one prefix must use the same Prefix, Replicas,
// LeaseTTL, WakeMaxAge and MaxPendingWakes: they define the shared streams and buckets, and
// an existing one with other settings is refused with ErrConfigMismatch.
type DispatcherConfig struct {
	// Prefix is the first subject token and names the streams and buckets
	// (<PREFIX>_READY, <PREFIX>_WAKE, <PREFIX>_TIMERS, <prefix>_tasks,
	// <prefix>_leases).
	// Default "noeta", the Log's default, so one prefix names one deployment.
	Prefix string
	// Replicas of the streams and buckets: 1 on a single node, 3 on a cluster.
	Replicas int
	// AsyncLiveness creates the lease keys' bucket and the ready stream
	// with the server's asynchronous persist mode: their writes are
	// flushed in the background instead of synced one by one (ADR 0109).
	// Neither holds anything the rows and the task logs do not: a lease
	// key lost to a crash is a lease that expired early (its holder's
	// writes are refused), a ready signal lost one the next reconcile pass
	// sends again. Meant for a single server that syncs every write and
	// whose lease holders die with it (jshost sets it on the embedded
	// server); a holder that outlives a crashed server may find its lease
	// cut short. Refused with Replicas > 1, where the server does not
	// offer the mode. A bucket or stream that exists keeps the mode it was
	// created with.
	AsyncLiveness bool
	// LeaseTTL is the length of every lease: the leases bucket's TTL, so the
	// server's clock decides expiry. Whole seconds, at least 1s (the server's
	// expiry granularity). Default 30s.
	LeaseTTL time.Duration
	// HeartbeatMax is the number of heartbeats a lease may take before the
	// task is released. Default 360.
	HeartbeatMax int
	// ReclaimMax is the number of stale reclaims in a row (without a
	// heartbeat, a release or a write to the task's log under the lease in
	// between) after which the dispatcher gives up on a task
	// (ReasonStaleReclaimExceeded): one more lease, carrying
	// eventlog.Lease.Ending, records its end. Default 3.
	ReclaimMax int
	// MaxFailAttempts is the number of retryable failures over a task's life
	// after which the dispatcher gives up on it the same way
	// (ReasonMaxAttemptsExceeded). Default 3.
	MaxFailAttempts int
	// RequestTimeout bounds each request to the server when ctx has no
	// deadline. Default 5s.
	RequestTimeout time.Duration
	// WakeMaxAge is the MaxAge of the wake and timers streams. Default
	// DefaultWakeMaxAge.
	WakeMaxAge time.Duration
	// MaxPendingWakes bounds a row's buffer of wakes that matched nothing
	// yet: Wake past it returns eventlog.ErrTooManyWakes, and the ingress
	// holds such a message in the wake stream, which takes as many per
	// subject before it refuses the sender (see WakeStreamConfig). Default
	// eventlog.DefaultMaxPendingWakes.
	MaxPendingWakes int
	// SweepInterval is how often this Dispatcher reconciles by itself
	// (jittered by ±25%), besides once when it opens, after every reconnect
	// of its connection and whenever its ingress consumer had to be created
	// again. Expired leases are normally requeued at once by the leases
	// watcher and signals published right after the write that made a task
	// ready; a reconcile pass catches what no watcher saw (every process was
	// down when a lease expired, or the watcher missed a marker during a
	// failover) and repairs what a crash between two writes left behind (a
	// ready task without its signal, a timer without its schedule or past
	// its deadline). Default half the lease TTL, at least 1s and at most
	// DefaultSweepInterval (which the default TTL of 30s gives): what a pass
	// repairs waits one or two passes, so a repair comes within about two
	// lease TTLs, like a reclaimed lease. Negative turns it off (for a
	// second Dispatcher in a process that already runs one).
	SweepInterval time.Duration
	// FullSweepInterval is the period in which this Dispatcher's passes
	// read every row: a pass reads the rows written since the pass before
	// (ADR 0092) and a slice of a rolling round that reads every row
	// written before it began, paced to end within this interval (ADR
	// 0110). A round reads at catch-up pace at the first pass, after a
	// reconnect and whenever the rows stream cannot vouch for what
	// changed (reconcile_view.go). Without a loop of passes (a negative
	// SweepInterval) a pass reads the round's rest at once. Default
	// DefaultFullSweepInterval.
	FullSweepInterval time.Duration
	// AwaitingSubtasks, if set, is told after a reconcile pass of every task
	// that has waited since the pass before, in the same suspend, on
	// subtasks whose rows all say they ended, with those subtasks. A child's result reaches its
	// parent through an observer of the child's last record; when the
	// process that committed that record dies before handing it off, nothing
	// else would look again, and the parent would wait until some process
	// restarts and recovers every handoff. The callback (the ChildLifecycle
	// observer's RecoverTasks) redoes the handoffs of just those children.
	// It runs on the reconciler's goroutine, with a deadline of one
	// RequestTimeout a subtask and one more, at most six.
	// [Dispatcher.RecoverAwaiting] asks the next pass not to wait.
	AwaitingSubtasks func(ctx context.Context, parent string, subtasks []string)
	// Now is the local clock: lease expiry as reported (Lease.Expires), the
	// local half of the liveness check (see Valid) and whether a timer is due
	// at suspend. Default time.Now.
	Now func() time.Time
	// Logger receives what the Dispatcher cannot return to a caller: wakes
	// for unknown tasks, side effects that failed after a committed write.
	// Default slog.Default().
	Logger *slog.Logger
	// ApproveSubjectAuth is how an answer that arrives on an approval
	// subject (ApproveSubject) is recorded as authenticated. The subject
	// names the approver, but only the broker's permissions make that
	// name mean anything, and only the deployment knows what they are:
	//   - noeta.AuthNATS where every user that may publish on
	//     <prefix>.approve.<approver>.> is that approver's own
	//     (deploy/nats's approver role): the broker vouches for the name;
	//   - noeta.AuthLocal on the embedded default, whose one local user
	//     may publish on every approver's subject: it proves no more than
	//     that the sender holds the data directory's credentials;
	//   - noeta.AuthNone, the default: the broker vouches for nothing, and
	//     an engine that requires authenticated approvals refuses it.
	// See docs/adr/0048. The default is the one that cannot record a
	// vouching nobody did.
	ApproveSubjectAuth string
}

// Validate reports the first invalid field of c, by name.
func (c DispatcherConfig) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (c DispatcherConfig) withDefaults() (DispatcherConfig, error) {
	bad := func(format string, args ...any) (DispatcherConfig, error) {
		return c, fmt.Errorf("jetstream: DispatcherConfig."+format, args...)
	}
	if c.Prefix == "" {
		c.Prefix = "noeta"
	}
	if err := noeta.ValidateToken("DispatcherConfig.Prefix", c.Prefix, 32); err != nil {
		return c, fmt.Errorf("jetstream: %w", err)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return bad("Replicas is %d, want 1 to 5", c.Replicas)
	}
	if c.AsyncLiveness && c.Replicas > 1 {
		return bad("AsyncLiveness is set with Replicas %d: the server persists a replicated stream through its Raft log, not asynchronously", c.Replicas)
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		return bad("LeaseTTL is %v, want whole seconds, at least 1s (it is the leases bucket's TTL)", c.LeaseTTL)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"HeartbeatMax", &c.HeartbeatMax, DefaultHeartbeatMax},
		{"ReclaimMax", &c.ReclaimMax, DefaultReclaimMax},
		{"MaxFailAttempts", &c.MaxFailAttempts, DefaultMaxFailAttempts},
		{"MaxPendingWakes", &c.MaxPendingWakes, eventlog.DefaultMaxPendingWakes},
	} {
		if *f.v < 0 {
			return bad("%s is negative (%d)", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.RequestTimeout < 0 {
		return bad("RequestTimeout is negative (%v)", c.RequestTimeout)
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.WakeMaxAge < 0 {
		return bad("WakeMaxAge is negative (%v)", c.WakeMaxAge)
	}
	if c.WakeMaxAge == 0 {
		c.WakeMaxAge = DefaultWakeMaxAge
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = defaultSweepInterval(c.LeaseTTL)
	}
	if c.FullSweepInterval < 0 {
		return bad("FullSweepInterval is negative (%v)", c.FullSweepInterval)
	}
	if c.FullSweepInterval == 0 {
		c.FullSweepInterval = DefaultFullSweepInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch c.ApproveSubjectAuth {
	case "":
		c.ApproveSubjectAuth = noeta.AuthNone
	case noeta.AuthNone, noeta.AuthLocal, noeta.AuthNATS:
	default:
		return bad("ApproveSubjectAuth is %q, want %q, %q or %q (an approval subject is vouched for by the broker or by nothing)",
			c.ApproveSubjectAuth, noeta.AuthNATS, noeta.AuthLocal, noeta.AuthNone)
	}
	return c, nil
}

func (c DispatcherConfig) upperPrefix() string {
	return strings.ToUpper(strings.ReplaceAll(c.Prefix, "-", "_"))
}
func (c DispatcherConfig) readyStream() string { return c.upperPrefix() + "_READY" }
func (c DispatcherConfig) wakeStream() string  { return c.upperPrefix() + "_WAKE" }
func (c DispatcherConfig) timerStream() string { return c.upperPrefix() + "_TIMERS" }

// checkRowsNotLost refuses to create the rows bucket afresh beside a task
// stream that holds records: the rows were there and are gone, and an empty
// bucket would leave every waiting task unknown to the dispatcher ("no task
// in this deployment") with nothing said.
func checkRowsNotLost(ctx context.Context, js jetstream.JetStream, c DispatcherConfig) error {
	bucket := "KV_" + c.tasksBucket()
	_, err := js.Stream(ctx, bucket)
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // there, or a failure ensureKV reports
	}
	name := Config{Prefix: c.Prefix}.streamName()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil // no task stream either: a new deployment
	}
	if n := s.CachedInfo().State.Msgs; n > 0 {
		return fmt.Errorf("%w: the dispatcher's rows (%s) are missing while task stream %s holds %d records; restore %s from a backup: the tasks it knew cannot be leased, woken or answered without it",
			ErrStreamLost, bucket, name, n, bucket)
	}
	return nil
}

func (c DispatcherConfig) tasksBucket() string  { return c.Prefix + "_tasks" }
func (c DispatcherConfig) leasesBucket() string { return c.Prefix + "_leases" }

// ReadyStreamConfig is the ready queue's definition: a work queue holding at
// most one signal per task subject, refusing (not replacing) a second.
func ReadyStreamConfig(c DispatcherConfig) jetstream.StreamConfig {
	c, _ = c.withDefaults()
	return jetstream.StreamConfig{
		Name:                 c.readyStream(),
		Description:          "noeta ready queue: one coalesced signal per ready task",
		Subjects:             []string{dispatchSubjects{c.Prefix}.readyAll()},
		Retention:            jetstream.WorkQueuePolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             c.Replicas,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxMsgs:              -1,
		MaxBytes:             -1,
		PersistMode:          c.persistMode(),
	}
}

// persistMode is the lease keys' and the ready signals' persist mode.
func (c DispatcherConfig) persistMode() jetstream.PersistModeType {
	if c.AsyncLiveness {
		return jetstream.AsyncPersistMode
	}
	return jetstream.DefaultPersistMode
}

// WakeStreamConfig is the wake ingress's definition: what any publisher of
// wakes and every approver writes to, so nothing in it can remove what
// another wrote. No roll-ups (a Nats-Rollup header is refused, where it
// used to purge the stream), no purge or delete, no schedules (timers are on
// TimerStreamConfig's stream, which only the engine writes). Work-queue
// retention: a message leaves once a Dispatcher has applied it, so what a
// subject holds is what waits for its task; MaxMsgsPerSubject with
// DiscardNewPerSubject caps that per task (per approver on an approval
// subject) and refuses the sender past it. The ingress holds, unacknowledged,
// a wake whose row's buffer is full (MaxPendingWakes), so a flood to one task
// fills its subject and is refused by the broker, with an error to the
// sender, instead of growing the row.
func WakeStreamConfig(c DispatcherConfig) jetstream.StreamConfig {
	c, _ = c.withDefaults()
	s := dispatchSubjects{c.Prefix}
	return jetstream.StreamConfig{
		Name:                 c.wakeStream(),
		Description:          "noeta wake ingress: wakes and approvals for tasks, each held until a dispatcher applies it",
		Subjects:             []string{s.wakeIngress(), s.approveIngress()},
		Retention:            jetstream.WorkQueuePolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             c.Replicas,
		MaxAge:               c.WakeMaxAge,
		MaxMsgsPerSubject:    int64(c.MaxPendingWakes),
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		DenyDelete:           true,
		DenyPurge:            true,
		MaxMsgs:              -1,
		MaxBytes:             -1,
	}
}

// TimerStreamConfig is the timers' definition: the dispatcher's message
// schedules and the copies the broker fires from them, on subjects only the
// engine's NATS user may write. Schedules need roll-ups (a re-armed timer
// replaces its schedule) and per-message TTLs (a schedule is exempt from
// MaxAge), which is why they cannot share the ingress.
func TimerStreamConfig(c DispatcherConfig) jetstream.StreamConfig {
	c, _ = c.withDefaults()
	return jetstream.StreamConfig{
		Name:              c.timerStream(),
		Description:       "noeta timers: the dispatcher's schedules, and the wakes the broker fires from them",
		Subjects:          []string{dispatchSubjects{c.Prefix}.timerAll()},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          c.Replicas,
		MaxAge:            c.WakeMaxAge,
		Discard:           jetstream.DiscardOld,
		AllowMsgSchedules: true,
		AllowMsgTTL:       true,
		AllowRollup:       true,
		MaxMsgs:           -1,
		MaxBytes:          -1,
	}
}

// dispatchSubjects builds the dispatcher's subject names of one prefix.
//
//	<prefix>.ready.<queue>.<p>.<task>          ready signal (READY stream)
//	<prefix>.ready.<queue>.<p>.<task>.front    its copy ahead of the queue (READY stream)
//	<prefix>.wake.<p>.<task>                   wake ingress (WAKE stream)
//	<prefix>.approve.<approver>.<p>.<task>     an approver's answers (WAKE stream)
//	<prefix>.timer.<p>.<task>.<gen>            timer schedule (TIMERS stream)
//	<prefix>.timer.<p>.<task>                  where the broker fires it (TIMERS stream)
type dispatchSubjects struct{ prefix string }

func (s dispatchSubjects) ready(queue, task string) string {
	return s.prefix + ".ready." + queue + "." + strconv.Itoa(Partition(task)) + "." + task
}

// readyFront is the subject of a signal that goes ahead of the queue (see
// taskRow.Front): the ready subject with one more token, so the queue's own
// consumer (readyQueue, exactly two tokens after the queue) never sees it.
func (s dispatchSubjects) readyFront(queue, task string) string {
	return s.ready(queue, task) + ".front"
}
func (s dispatchSubjects) readyQueue(queue string) string {
	return s.prefix + ".ready." + queue + ".*.*"
}
func (s dispatchSubjects) readyFrontQueue(queue string) string {
	return s.prefix + ".ready." + queue + ".*.*.front"
}
func (s dispatchSubjects) readyAll() string { return s.prefix + ".ready.>" }
func (s dispatchSubjects) wake(task string) string {
	return s.prefix + ".wake." + strconv.Itoa(Partition(task)) + "." + task
}
func (s dispatchSubjects) wakeIngress() string { return s.prefix + ".wake.*.*" }
func (s dispatchSubjects) approve(approver, task string) string {
	return s.prefix + ".approve." + approver + "." + strconv.Itoa(Partition(task)) + "." + task
}
func (s dispatchSubjects) approveIngress() string { return s.prefix + ".approve.*.*.*" }
func (s dispatchSubjects) timerTarget(task string) string {
	return s.prefix + ".timer." + strconv.Itoa(Partition(task)) + "." + task
}
func (s dispatchSubjects) timer(task string, gen uint64) string {
	return s.timerTarget(task) + "." + strconv.FormatUint(gen, 10)
}
func (s dispatchSubjects) timerAll() string    { return s.prefix + ".timer.>" }
func (s dispatchSubjects) timersFired() string { return s.prefix + ".timer.*.*" }

// taskOfTimer returns the task of a fired timer's subject.
func (s dispatchSubjects) taskOfTimer(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".timer.")
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 2 || noeta.ValidateTaskID(parts[1]) != nil {
		return "", false
	}
	return parts[1], true
}

// ingressSource says where an ingress message came from: its task, and for
// an approval subject the approver the subject names ("" on the plain wake
// subject).
type ingressSource struct {
	task     string
	approver string
}

// parseIngress returns the source of an ingress subject: a plain wake
// (<prefix>.wake.<p>.<task>) or an approval (<prefix>.approve.<approver>.<p>.<task>).
func (s dispatchSubjects) parseIngress(subject string) (ingressSource, bool) {
	if task, ok := s.taskOfWake(subject); ok {
		return ingressSource{task: task}, true
	}
	rest, ok := strings.CutPrefix(subject, s.prefix+".approve.")
	if !ok {
		return ingressSource{}, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || noeta.ValidateToken("approver", parts[0], 64) != nil || noeta.ValidateTaskID(parts[2]) != nil {
		return ingressSource{}, false
	}
	return ingressSource{task: parts[2], approver: parts[0]}, true
}

// taskOfReady returns the task of a ready subject.
func (s dispatchSubjects) taskOfReady(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".ready.")
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) == 4 && parts[3] == "front" {
		parts = parts[:3]
	}
	if len(parts) != 3 {
		return "", false
	}
	return parts[2], true
}

// taskOfWake returns the task of an ingress subject. The partition token is
// not checked: a waker that computed it wrongly still wakes the task it named.
func (s dispatchSubjects) taskOfWake(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".wake.")
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 2 || noeta.ValidateTaskID(parts[1]) != nil {
		return "", false
	}
	return parts[1], true
}

// WakeSubject is the ingress subject an external waker publishes a wake for
// task to: JetStream publish, body the wake's JSON ({"kind": …}, as
// noeta.Wake marshals). Every Dispatcher of prefix consumes it; each message
// is applied once.
func WakeSubject(prefix, task string) string { return dispatchSubjects{prefix}.wake(task) }

// Headers of the dispatcher's own messages.
const (
	// hdrTimerGen marks a timer schedule (and so the wake the broker fires
	// from it) with the lease generation whose suspend armed it. The broker
	// keeps custom headers when it fires a schedule.
	hdrTimerGen = "Noeta-Timer-Generation"
	// ingressAckWait and readyAckWait bound how long a fetched,
	// unacknowledged message stays with its fetcher before the server
	// hands it to another (ackWait). Processing takes a few requests; the
	// wait only matters when a process dies or is cut off holding a
	// message, and then it is how late every wake and fired timer it had
	// fetched (up to ingressBatch of them) is applied, and how late a task
	// whose ready signal it had fetched is leased. A slow application that
	// outlasts it is redelivered to another Dispatcher, which finds it
	// applied (the row's Applied record, the row no longer ready) and acks
	// it.
	ingressAckWait = 5 * time.Second
	readyAckWait   = 10 * time.Second
	// ackWaitMin is the shortest: a few requests under load.
	ackWaitMin = 2 * time.Second
	// readyInactive: a queue's consumer nobody pulled from for this long is
	// removed by the server; the next Lease on the queue creates it again.
	readyInactive = time.Hour
	// waitSlice is the expiry of one pull request of a blocked Lease.
	waitSlice = 5 * time.Second
	// appliedKeep is how many ingress stream sequences a row remembers, to
	// recognise a redelivery.
	appliedKeep = 64
	// ingressConsumer and timersConsumer are the durables every Dispatcher
	// of a prefix shares, on the wake stream and on the timers stream.
	ingressConsumer = "dispatcher-ingress"
	timersConsumer  = "dispatcher-timers"
	// ingressBatch bounds the ingress messages one Dispatcher holds
	// unacknowledged, so a process that dies strands few of them.
	ingressBatch = 16
	// ingressPullExpiry and ingressHeartbeat: a pull request on the ingress
	// lives ingressPullExpiry, and the server holding it sends a heartbeat
	// every ingressHeartbeat while it has nothing to deliver. A pull request
	// dies silently with the node that led the consumer; the client notices
	// after two missed heartbeats and pulls again from the new leader. With
	// the client's defaults (30s, 15s) that took 30s, and every wake and
	// fired timer waited for it.
	// heldWakeDelay: how long a wake held for a full buffer waits in the
	// stream before it is tried again.
	heldWakeDelay = 2 * time.Second
	// heldAnswerDelay and heldAnswerTries: an answer that met another on
	// the same handle is tried again every heldAnswerDelay, up to
	// heldAnswerTries deliveries (about half a minute), for the task to
	// wait on the handle again (a quorum's next approval).
	heldAnswerDelay   = 500 * time.Millisecond
	heldAnswerTries   = 60
	ingressPullExpiry = 4 * time.Second
	ingressHeartbeat  = time.Second
)

// Dispatcher is the JetStream eventlog.Dispatcher and eventlog.LeaseRegistry:
// any number of them, in any number of processes, dispatch one prefix
// together, with no elected leader.
//
//   - The row of each task is a JSON value in KV <prefix>_tasks; every
//     transition is a compare-and-set on its revision, retried on conflict.
//   - Liveness is KV <prefix>_leases, whose TTL is the lease TTL: key
//     <task>.<lease id> exists while the lease lives; a heartbeat rewrites it
//     (a fresh age), release deletes it, and the server expires it on its own
//     clock, leaving a marker every Dispatcher's watcher sees and acts on.
//   - A ready, unreserved task has one signal in the work-queue stream
//     <PREFIX>_READY; idle workers block on a pull from their queue.
//   - Wakes for tasks may also arrive as messages on <prefix>.wake.<p>.<task>
//     and answers on <prefix>.approve.<approver>.<p>.<task> (the <PREFIX>_WAKE
//     stream); a shared durable consumer applies each once. Timers (and
//     approval expiries) are message schedules the broker fires in the
//     <PREFIX>_TIMERS stream, applied by a second shared durable.
//
// It is safe for concurrent use.
type Dispatcher struct {
	cfg    DispatcherConfig
	nc     *nats.Conn
	js     jetstream.JetStream
	subj   dispatchSubjects
	log    *slog.Logger
	tasks  jetstream.KeyValue
	leases jetstream.KeyValue
	ready  jetstream.Stream
	wake   jetstream.Stream
	timers jetstream.Stream
	// ended: lease keys deleted after their row moved on, whose expiry
	// markers the leases watcher passes over.
	ended *endedLeases

	closed atomic.Bool
	done   chan struct{}

	// passSem lets one reconcile pass run at a time; view is what the
	// passes keep between them (reconcile_view.go), only read or changed
	// by the pass that holds passSem. fullWanted asks for a round at
	// catch-up pace once its duty allows (a reconnect).
	passSem    chan struct{}
	view       rowView
	fullWanted atomic.Bool
	passGap    time.Duration // the time between passes the round is paced for

	// awaiting is what the last reconcile pass saw waiting on subtasks:
	// task → the generation of its suspend (nudgeParents).
	awaitingMu sync.Mutex
	awaiting   map[string]uint64
	// nudgeAll makes the next pass nudge every parent it finds waiting on
	// ended subtasks, not only those it saw in the pass before
	// (RecoverAwaiting).
	nudgeAll bool
	bg       context.Context // ended by Close: the background goroutines' context
	stopBG   context.CancelFunc
	watcher  jetstream.KeyWatcher // guarded by mu once running
	// status reports the connection's reconnects to the reconciler; kick
	// asks it for a pass now (buffered 1: kicks coalesce).
	status chan nats.Status
	kick   chan struct{}

	// mu guards queues, closing, inputs, waiting and spares. closing is set
	// under mu by Close before it waits, so no goroutine is added to wg
	// after the wait began, and no input iterator is installed after Close
	// drained the last one.
	mu sync.Mutex
	// strandMu guards stranded: the ready rows whose signal the passes saw
	// there, and since when (stranded.go).
	strandMu sync.Mutex
	stranded map[string]strandedSeen
	closing  bool
	queues   map[string]jetstream.Consumer
	// frontCreating holds the queues whose front consumer is being created
	// in the background (see frontSignal).
	frontCreating map[string]bool
	// waiting are the blocked untargeted Leases by queue, in the order they
	// began waiting; spares the pull requests they left open
	// (dispatcher_handoff.go).
	waiting map[string][]*waiter
	spares  map[string][]*sparePull
	inputs  map[string]jetstream.MessagesContext // by lane consumer
	// backstops are the local timers behind the broker's schedules, by
	// task/generation (see backstopTimer).
	backstops map[string]*time.Timer
	wg        sync.WaitGroup

	stats dispatcherCounters

	hooks dispatcherHooks
}

// dispatcherHooks are set only by tests, before a Dispatcher's first Lease.
type dispatcherHooks struct {
	// beforeWithdraw and afterWithdraw run around the withdrawal of the
	// ready signals of a task leased by name.
	beforeWithdraw, afterWithdraw func(eventlog.Lease)
}

var _ eventlog.Dispatcher = (*Dispatcher)(nil)

// DispatcherStats counts what this Dispatcher instance did on its own.
type DispatcherStats struct {
	WakesApplied      uint64 // ingress messages applied to a row (fired timers and approvals included)
	TimersFired       uint64 // fired timers that matched the suspend that armed them
	StaleTimers       uint64 // fired timers whose suspend had ended: dropped
	DuplicateWakes    uint64 // ingress redeliveries recognised by stream sequence
	UnknownTaskWakes  uint64 // ingress wakes for a task without a row: acked and dropped
	InvalidWakes      uint64 // ingress messages that are not a valid wake (or approval, or fired timer): dropped
	RefusedWakes      uint64 // ingress human_responses that matched no suspend of now: dropped
	Requeued          uint64 // expired leases this instance requeued or ended
	Reconciles        uint64 // reconcile passes that completed
	Resignalled       uint64 // ready signals a reconcile pass found missing and published again
	TimersBackstopped uint64 // timers this instance fired itself, the broker's schedule not having fired in time
	// HeldWakes counts the times an ingress wake was handed back to the
	// wake stream because its task's buffer was full (MaxPendingWakes); once
	// a task's held wakes fill its subject's cap, the broker refuses the
	// sender.
	HeldWakes uint64
	// StaleSignals counts ready signals this instance's untargeted leases
	// fetched and dropped because the row had moved on (another spell, a
	// lease by name, a reservation); each cost a fetch, a row read and an
	// acknowledgement.
	StaleSignals uint64
	// WithdrawnSignals counts ready signals this instance removed from the
	// queue after leasing their task by name, so no untargeted lease has to
	// fetch and drop them.
	WithdrawnSignals uint64
	// WatchedEnds counts the lease ends the leases watcher acted on (expiry
	// markers and purged keys): each cost a row read. A lease released
	// normally is not one.
	WatchedEnds uint64
	// Republished counts stranded ready signals a reconcile pass purged and
	// published again: a signal the queue's consumer would never deliver
	// (stranded.go).
	Republished uint64
	// RowsRead counts the messages of the rows bucket the reconcile passes
	// read: the rows written since the pass before and a slice of the
	// rolling round (reconcile_view.go).
	RowsRead uint64
	// FullReconciles counts the rounds of passes that read every row.
	FullReconciles uint64
	// HandOffs counts the tasks this instance's Enqueue (with HandOff)
	// created leased to one of its blocked Leases, skipping the queue
	// (one given back, its Lease having gone meanwhile, included).
	HandOffs uint64
}

type dispatcherCounters struct {
	wakesApplied, timersFired, staleTimers, duplicateWakes, unknownTaskWakes, invalidWakes, refusedWakes, requeued atomic.Uint64
	reconciles, resignalled, timersBackstopped, heldWakes                                                          atomic.Uint64
	staleSignals, withdrawnSignals, watchedEnds, republished                                                       atomic.Uint64
	rowsRead, fullReconciles, handOffs                                                                             atomic.Uint64
}

// Stats returns this instance's counters.
func (d *Dispatcher) Stats() DispatcherStats {
	s := &d.stats
	return DispatcherStats{
		WakesApplied:      s.wakesApplied.Load(),
		TimersFired:       s.timersFired.Load(),
		StaleTimers:       s.staleTimers.Load(),
		DuplicateWakes:    s.duplicateWakes.Load(),
		UnknownTaskWakes:  s.unknownTaskWakes.Load(),
		InvalidWakes:      s.invalidWakes.Load(),
		RefusedWakes:      s.refusedWakes.Load(),
		Requeued:          s.requeued.Load(),
		Reconciles:        s.reconciles.Load(),
		Resignalled:       s.resignalled.Load(),
		TimersBackstopped: s.timersBackstopped.Load(),
		HeldWakes:         s.heldWakes.Load(),
		StaleSignals:      s.staleSignals.Load(),
		WithdrawnSignals:  s.withdrawnSignals.Load(),
		WatchedEnds:       s.watchedEnds.Load(),
		Republished:       s.republished.Load(),
		RowsRead:          s.rowsRead.Load(),
		FullReconciles:    s.fullReconciles.Load(),
		HandOffs:          s.handOffs.Load(),
	}
}

// OpenDispatcher connects a Dispatcher over nc (which the caller owns and
// closes), creating the streams, buckets and the shared ingress consumer if
// they do not exist and refusing ones that exist with other settings. It
// starts two goroutines, stopped by Close: the leases watcher and the
// ingress consumer (and a third, the reconciler, unless SweepInterval < 0,
// whose first pass runs at once).
func OpenDispatcher(ctx context.Context, nc *nats.Conn, cfg DispatcherConfig) (*Dispatcher, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	d := &Dispatcher{
		cfg: c,
		nc:  nc,
		// A marker comes one TTL after the delete; two generations of
		// 2 TTL each cover a late one.
		ended:   newEndedLeases(2*c.LeaseTTL, 1<<16),
		js:      js,
		subj:    dispatchSubjects{c.Prefix},
		log:     c.Logger.With("component", "jetstream.Dispatcher", "prefix", c.Prefix),
		done:    make(chan struct{}),
		kick:    make(chan struct{}, 1),
		passSem: make(chan struct{}, 1),
		// The round's slices are sized for passes SweepInterval apart;
		// without a loop (negative) a pass reads the round's rest.
		passGap: c.SweepInterval,
		queues:  map[string]jetstream.Consumer{},

		frontCreating: map[string]bool{},
		waiting:       map[string][]*waiter{},
		spares:        map[string][]*sparePull{},
		inputs:        map[string]jetstream.MessagesContext{},

		backstops: map[string]*time.Timer{},
	}
	if err := checkRowsNotLost(ctx, js, c); err != nil {
		return nil, err
	}
	// Every read of a row or a lease key decides a write or a fence, so it
	// must see every acknowledged write: ensureKV reads a replicated bucket
	// from its leader and a single copy by direct gets (bucketReads).
	if d.tasks, err = ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      c.tasksBucket(),
		Description: "noeta dispatcher rows: task -> status, queue, lease, wakes",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}); err != nil {
		return nil, err
	}
	if d.leases, err = ensureKVMode(ctx, js, c.persistMode(), jetstream.KeyValueConfig{
		Bucket:      c.leasesBucket(),
		Description: "noeta lease liveness: <task>.<lease id> lives while the lease does",
		History:     1,
		TTL:         c.LeaseTTL,
		// Expiry then writes a marker, so watchers learn of it.
		LimitMarkerTTL: c.LeaseTTL,
		Storage:        jetstream.FileStorage,
		Replicas:       c.Replicas,
	}); err != nil {
		return nil, err
	}
	if st, err := d.leases.Status(ctx); err != nil {
		return nil, fmt.Errorf("jetstream: key-value bucket %s: %w", c.leasesBucket(), err)
	} else if st.LimitMarkerTTL() <= 0 {
		return nil, fmt.Errorf("%w: key-value bucket %s has no limit marker TTL, so lease expiry would go unseen", ErrConfigMismatch, c.leasesBucket())
	}
	if d.ready, err = ensureStream(ctx, js, ReadyStreamConfig(c)); err != nil {
		return nil, err
	}
	migrated, err := d.openInputStreams(ctx)
	if err != nil {
		return nil, err
	}
	lanes := d.lanes()
	its := make([]jetstream.MessagesContext, 0, len(lanes))
	stopAll := func() {
		for _, it := range its {
			it.Stop()
		}
	}
	for _, l := range lanes {
		it, err := d.openLane(ctx, l)
		if err != nil {
			stopAll()
			return nil, err
		}
		its = append(its, it)
	}

	bg, stop := context.WithCancel(context.Background())
	d.bg, d.stopBG = bg, stop
	// UpdatesOnly: history is not replayed; leases that expired while no
	// Dispatcher watched are the reconciler's.
	if d.watcher, err = d.leases.WatchAll(bg, jetstream.UpdatesOnly(), jetstream.MetaOnly()); err != nil {
		stopAll()
		stop()
		return nil, fmt.Errorf("jetstream: watch %s: %w", c.leasesBucket(), err)
	}
	d.wg.Add(1 + len(lanes))
	go d.watchLeases(d.watcher)
	for i, l := range lanes {
		d.inputs[l.consumer] = its[i]
		go d.consumeLane(l, its[i])
	}
	if migrated {
		// The old stream's schedules went with it: every timed suspend
		// is armed again (or fired, if due) from its row.
		if _, err := d.sweep(ctx); err != nil {
			d.log.Warn("re-arm the timers after the migration; the reconciler will", "err", err)
		}
	}
	if c.SweepInterval > 0 {
		d.status = nc.StatusChanged(nats.CONNECTED)
		d.wg.Add(1)
		go d.reconcileLoop(bg, d.status)
	}
	return d, nil
}

// lane is one of a Dispatcher's two inputs: a durable consumer every
// Dispatcher of the prefix shares, on the wake stream (wakes and approvals
// from outside) or on the timers stream (what the broker fires).
type lane struct {
	consumer string
	stream   string
	filters  []string
	what     string // for logs
}

func (d *Dispatcher) lanes() []lane {
	return []lane{
		{ingressConsumer, d.cfg.wakeStream(), []string{d.subj.wakeIngress(), d.subj.approveIngress()}, "wake ingress"},
		{timersConsumer, d.cfg.timerStream(), []string{d.subj.timersFired()}, "fired timers"},
	}
}

// ackWait is the ack wait of a consumer whose bound is ceiling: the lease
// TTL, within [ackWaitMin, ceiling]. A process cut off while it holds a
// signal or a wake then gives it back no later than a lease it held would
// lapse. The partition run (lease TTL 3 s) had a timer due while a serve
// was cut off fire 10.5 s late, 6.7 s after the last heal: what a ready
// signal taken by that serve's pending pull request and held for the 10 s
// ack wait would do. The default TTL (30 s) keeps the ceilings, as before.
func ackWait(ttl, ceiling time.Duration) time.Duration {
	return max(ackWaitMin, min(ttl, ceiling))
}

// openLane creates (or updates: every Dispatcher may race to, and an
// older one's settings are brought up to date) the shared consumer of l
// and starts pulling from it.
func (d *Dispatcher) openLane(ctx context.Context, l lane) (jetstream.MessagesContext, error) {
	ctx, cancel := d.withTimeout(ctx)
	defer cancel()
	cons, err := d.js.CreateOrUpdateConsumer(ctx, l.stream, jetstream.ConsumerConfig{
		Durable:        l.consumer,
		Description:    "noeta dispatchers: apply each " + l.what + " message once",
		FilterSubjects: l.filters,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait(d.cfg.LeaseTTL, ingressAckWait),
		MaxDeliver:     -1,
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: consumer %s on %s: %w", l.consumer, l.stream, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(ingressBatch),
		jetstream.PullExpiry(ingressPullExpiry), jetstream.PullHeartbeat(ingressHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("jetstream: consume %s: %w", l.consumer, err)
	}
	return it, nil
}

// Close stops the Dispatcher's goroutines and waits for them; every later
// call returns eventlog.ErrClosed, and a blocked Lease returns it at once.
// Ingress messages it had fetched but not applied are handed back
// (negatively acknowledged) for another Dispatcher. The connection is the
// caller's. Close is idempotent.
func (d *Dispatcher) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	close(d.done)
	d.mu.Lock()
	d.closing = true
	inputs, watcher := d.inputs, d.watcher
	d.stopBackstops()
	d.mu.Unlock()
	_ = watcher.Stop()
	for _, it := range inputs {
		it.Drain()
	}
	d.stopBG()
	if d.status != nil {
		d.nc.RemoveStatusListener(d.status)
	}
	d.wg.Wait()
	return nil
}

// check returns ctx's error or ErrClosed, the first checks of every method.
func (d *Dispatcher) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.closed.Load() {
		return eventlog.ErrClosed
	}
	return nil
}

// goTracked runs f on a goroutine Close waits for, unless Close has begun.
func (d *Dispatcher) goTracked(f func()) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing {
		return false
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		f()
	}()
	return true
}

func (d *Dispatcher) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d.cfg.RequestTimeout)
}

// detached is a context for the side effects of a write that has committed:
// they are finished even when the caller's ctx ends right after the write.
func (d *Dispatcher) detached() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d.cfg.RequestTimeout)
}

func validTaskID(field, id string) error {
	if err := noeta.ValidateTaskID(id); err != nil {
		return fmt.Errorf("%w: %s: %w", eventlog.ErrInvalidArgument, field, err)
	}
	return nil
}

// validQueue checks a queue name: it is a subject token and part of a
// consumer name, so [A-Za-z0-9_-]{1,64}.
func validQueue(field, queue string) error {
	if err := noeta.ValidateToken(field, queue, 64); err != nil {
		return fmt.Errorf("%w: %w", eventlog.ErrInvalidArgument, err)
	}
	return nil
}

func cloneWake(w *noeta.Wake) *noeta.Wake {
	if w == nil {
		return nil
	}
	c := w.Clone()
	return &c
}
