package observers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/noeta-go/noeta/eventlog"
)

// Observer consumes committed records. It sees every record of every task
// (log and inbox) after it is durable and can change none of them. Fed from
// a Feed it may see a record twice (a redelivery after a crash), so what it
// writes must be idempotent by (task, seq) — or (task, key) for an inbox
// record.
type Observer interface {
	// Name names the observer in stats, logs and durable consumer groups (a
	// token).
	Name() string
	// Observe handles one record. An error (or a panic) is counted; fed
	// from a Feed, the record is delivered again later.
	Observe(ctx context.Context, env eventlog.Envelope) error
}

// ObserverStats counts what happened to the records offered to one
// observer.
type ObserverStats struct {
	Observed uint64 // handled without error
	Failed   uint64 // returned an error
	Panicked uint64 // panicked (recovered)
	Dropped  uint64 // in-process only: the queue was full
	Queued   int    // in-process only: waiting in the queue now
	// Lag is the time from the commit of the last record handled to the end
	// of its handling.
	Lag time.Duration
}

type counters struct {
	observed, failed, panicked, dropped atomic.Uint64
	lagNanos                            atomic.Int64
}

func (c *counters) stats() ObserverStats {
	return ObserverStats{
		Observed: c.observed.Load(), Failed: c.failed.Load(), Panicked: c.panicked.Load(),
		Dropped: c.dropped.Load(), Lag: time.Duration(c.lagNanos.Load()),
	}
}

// errPanicked is wrapped for an observer that panicked.
var errPanicked = errors.New("observers: observer panicked")

// observe runs o on env, turning a panic into an error, and counts.
func observe(ctx context.Context, o Observer, env eventlog.Envelope, c *counters, now func() time.Time) (err error) {
	defer func() {
		if p := recover(); p != nil {
			// The stack is taken for the first panic only: an observer that
			// panics on every record must not cost the process a stack
			// trace per record.
			if c.panicked.Add(1) == 1 {
				err = fmt.Errorf("%w: %s: %v\n%s", errPanicked, o.Name(), p, debug.Stack())
			} else {
				err = fmt.Errorf("%w: %s: %v", errPanicked, o.Name(), p)
			}
		}
	}()
	if err = o.Observe(ctx, env); err != nil {
		c.failed.Add(1)
		return err
	}
	c.observed.Add(1)
	if !env.Time.IsZero() {
		c.lagNanos.Store(int64(now().Sub(env.Time)))
	}
	return nil
}

// DefaultQueueSize is the hand-off queue of an in-process observer.
const DefaultQueueSize = 1024

// InProcessConfig configures [NewInProcess].
type InProcessConfig struct {
	// QueueSize is each observer's hand-off queue (DefaultQueueSize). A
	// record that finds its observer's queue full is dropped and counted:
	// the writer never waits for an observer.
	QueueSize int
	Logger    *slog.Logger
	// Now is the clock lag is measured with (time.Now).
	Now func() time.Time
}

// InProcess feeds observers from a Subscriber, each from a bounded queue of
// its own drained by its own goroutine: a slow, blocked or panicking
// observer costs the writer one non-blocking channel send, and costs only its
// own records. Records reach an observer in the order the writers'
// deliveries ran, so one task's records arrive in log order.
type InProcess struct {
	log     *slog.Logger
	now     func() time.Time
	sub     *eventlog.Subscription
	runners []*inProcessRunner
	wg      sync.WaitGroup
	stop    context.CancelFunc
	// finish tells the drainers, at Close, to handle what is queued and
	// return.
	finish chan struct{}
	closed atomic.Bool
}

type inProcessRunner struct {
	o     Observer
	queue chan eventlog.Envelope
	c     counters
}

// NewInProcess subscribes obs to sub and starts their goroutines; Close
// stops them.
func NewInProcess(sub eventlog.Subscriber, cfg InProcessConfig, obs ...Observer) *InProcess {
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &InProcess{log: cfg.Logger, now: cfg.Now, stop: stop, finish: make(chan struct{})}
	for _, o := range obs {
		ir := &inProcessRunner{o: o, queue: make(chan eventlog.Envelope, cfg.QueueSize)}
		r.runners = append(r.runners, ir)
		r.wg.Go(func() { r.drain(ctx, ir) })
	}
	r.sub = sub.Subscribe(r.offer)
	return r
}

// offer is the Subscriber handler: on the writer's goroutine, it never
// blocks.
func (r *InProcess) offer(_ context.Context, env eventlog.Envelope) error {
	for _, ir := range r.runners {
		select {
		case ir.queue <- env:
		default:
			ir.c.dropped.Add(1)
		}
	}
	return nil
}

// An in-process observer that fails this many records in a row is paused
// (for pauseMin, doubling up to pauseMax while it keeps failing): a broken
// observer must not spend the engine's CPU on every record. While it is
// paused its queue fills and the writers' offers are dropped and counted.
const (
	failStreakPause = 100
	pauseMin        = time.Second
	pauseMax        = 30 * time.Second
)

func (r *InProcess) drain(ctx context.Context, ir *inProcessRunner) {
	f := failures{pause: pauseMin}
	for {
		select {
		case <-ctx.Done():
			return
		case env := <-ir.queue:
			if !r.handle(ctx, ir, env, &f) {
				return
			}
		case <-r.finish:
			// Close: what was committed before it is handled (an audit
			// trail must not lose the last records of a run), then stop.
			for {
				select {
				case <-ctx.Done():
					return
				case env := <-ir.queue:
					if !r.handle(ctx, ir, env, &f) {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// failures is a drainer's run of failures in a row and its next pause.
type failures struct {
	streak int
	pause  time.Duration
}

// handle runs ir's observer on env; it returns false when ctx ended during
// a pause.
func (r *InProcess) handle(ctx context.Context, ir *inProcessRunner, env eventlog.Envelope, f *failures) bool {
	err := observe(ctx, ir.o, env, &ir.c, r.now)
	if err == nil {
		f.streak, f.pause = 0, pauseMin
		return true
	}
	if f.streak++; f.streak >= failStreakPause {
		r.log.Warn("observer keeps failing; paused, its records are dropped meanwhile", "observer", ir.o.Name(), "failures_in_a_row", f.streak, "pause", f.pause)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(f.pause):
		}
		f.streak, f.pause = 0, min(f.pause*2, pauseMax)
	}
	if ctx.Err() == nil {
		// Logged for the first failures and then one in a thousand: the
		// counters have them all.
		if n := ir.c.failed.Load() + ir.c.panicked.Load(); n <= 10 || n%1000 == 0 {
			r.log.Warn("observer failed; the record is not retried in process", "observer", ir.o.Name(), "task", env.Task, "seq", env.Seq, "type", env.Type, "failures", n, "err", err)
		}
	}
	return true
}

// Stats returns each observer's counters, by name.
func (r *InProcess) Stats() map[string]ObserverStats {
	out := make(map[string]ObserverStats, len(r.runners))
	for _, ir := range r.runners {
		s := ir.c.stats()
		s.Queued = len(ir.queue)
		out[ir.o.Name()] = s
	}
	return out
}

// Close unsubscribes, lets each observer handle the records still in its
// queue until ctx ends, and stops the observers' goroutines. When ctx ends
// first, the records still queued are not handled; an observer blocked
// forever keeps its goroutine, which Close does not wait for beyond ctx.
func (r *InProcess) Close(ctx context.Context) error {
	if r.closed.Swap(true) {
		return nil
	}
	r.sub.Cancel()
	close(r.finish)
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		r.stop()
		return nil
	case <-ctx.Done():
		r.stop()
		return fmt.Errorf("observers: an observer did not stop: %w", ctx.Err())
	}
}

// DurableConfig configures [RunDurable].
type DurableConfig struct {
	// GroupPrefix starts every observer's consumer group name:
	// <GroupPrefix><observer name> ("obs-" if empty).
	GroupPrefix string
	// Feed holds the partitions, MaxDeliver, Backoff and AckWait of every
	// observer's consumer (its Group is set per observer).
	Feed   eventlog.FeedConfig
	Logger *slog.Logger
	Now    func() time.Time
}

// Durable feeds observers from a Feed, each through a consumer group of
// its own, so an observer that fails or lags holds back only itself.
type Durable struct {
	cfg     DurableConfig
	feed    eventlog.Feed
	runners []*durableRunner
}

type durableRunner struct {
	o Observer
	c counters
}

// NewDurable returns the runner of obs on feed; Run runs it.
func NewDurable(feed eventlog.Feed, cfg DurableConfig, obs ...Observer) (*Durable, error) {
	if cfg.GroupPrefix == "" {
		cfg.GroupPrefix = "obs-"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	d := &Durable{cfg: cfg, feed: feed}
	seen := map[string]bool{}
	for _, o := range obs {
		if seen[o.Name()] {
			// Two observers in one consumer group would each see part of
			// the records.
			return nil, fmt.Errorf("%w: two observers are named %q", ErrInvalidConfig, o.Name())
		}
		seen[o.Name()] = true
		fc := cfg.Feed
		fc.Group = cfg.GroupPrefix + o.Name()
		if err := fc.Validate(); err != nil {
			return nil, fmt.Errorf("observers: observer %s: %w", o.Name(), err)
		}
		d.runners = append(d.runners, &durableRunner{o: o})
	}
	return d, nil
}

// Run consumes until ctx ends and every observer's delivery in hand is
// answered; it returns the first consumer error other than ctx's.
func (d *Durable) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(d.runners))
	for i, dr := range d.runners {
		fc := d.cfg.Feed
		fc.Group = d.cfg.GroupPrefix + dr.o.Name()
		wg.Go(func() {
			errs[i] = d.feed.Consume(ctx, fc, func(hctx context.Context, del eventlog.Delivery) error {
				err := observe(hctx, dr.o, del.Env, &dr.c, d.cfg.Now)
				if err != nil {
					d.cfg.Logger.Warn("observer failed; the record will be delivered again", "observer", dr.o.Name(),
						"task", del.Env.Task, "seq", del.Env.Seq, "key", del.Env.Key, "attempt", del.Attempt, "err", err)
				}
				return err
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("observers: %s: %w", d.runners[i].o.Name(), err)
		}
	}
	return nil
}

// Stats returns each observer's counters, by name.
func (d *Durable) Stats() map[string]ObserverStats {
	out := make(map[string]ObserverStats, len(d.runners))
	for _, dr := range d.runners {
		out[dr.o.Name()] = dr.c.stats()
	}
	return out
}
