package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
)

// A gateway's sessions' tasks live on its own queue (Gateway.Queue), which
// only it works. When the process dies, its tasks stay there, parked,
// waiting for an approval, or leased by a worker that no longer
// heartbeats, and no one would ever end them. So every gateway says it is
// alive, and lists its sessions' tasks, in a key-value bucket of the
// deployment, <prefix>_gateways; and every gateway, on start and then on
// each beat, cancels the tasks listed under a gateway that has stopped
// beating, recording why (docs/adr/0096).
//
// The keys:
//
//	g.<queue>         the gateway's heartbeat, put again every HeartbeatEvery
//	t.<queue>.<task>  a session's task, listed before it is submitted and
//	                  removed once it has ended
//
// A gateway is gone when its heartbeat key is absent (it closed, or was
// swept), or when its revision has not moved for GoneAfter as the sweeper's
// own clock measures it: no two hosts' clocks are compared.

// Defaults of the liveness options.
const (
	// DefaultHeartbeatEvery is how often a gateway says it is alive, and
	// sweeps.
	DefaultHeartbeatEvery = 5 * time.Second
	// DefaultGoneAfter is how long a gateway's heartbeat must stand still
	// before its tasks are swept.
	DefaultGoneAfter = 30 * time.Second
)

// RegistryBucket is the name of the gateways' bucket under prefix.
func RegistryBucket(prefix string) string { return prefix + "_gateways" }

// Registry is the bucket where the gateways of a deployment say they are
// alive and list their sessions' tasks.
type Registry struct {
	kv jetstream.KeyValue
}

// OpenRegistry opens (or creates) the gateways' bucket on nc.
func OpenRegistry(ctx context.Context, nc *nats.Conn, prefix string, replicas int) (*Registry, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("gateway: registry: %w", err)
	}
	if replicas < 1 {
		replicas = 1
	}
	name := RegistryBucket(prefix)
	kv, err := js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, Description: "noeta gateway: the live gateways and their sessions' tasks", History: 1, Storage: jetstream.FileStorage, Replicas: replicas})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: registry bucket %s: %w", name, err)
	}
	return &Registry{kv: kv}, nil
}

// maxListed bounds the keys one sweep reads: past it, the rest wait for
// the next pass (the keys of the gateways gone are deleted as they are
// swept).
const maxListed = 100_000

// beatKey and taskKey are the registry's keys.
func beatKey(queue string) string       { return "g." + queue }
func taskKey(queue, task string) string { return "t." + queue + "." + task }

// liveness is a gateway's part in the registry.
type liveness struct {
	reg *Registry

	mu sync.Mutex
	// mine are this gateway's tasks listed, the ended ones to unlist.
	mine  map[string]bool
	ended []string
	// seen is, by queue, the heartbeat revision a sweep last saw and
	// since when (by this process's clock).
	seen map[string]beatSeen
}

type beatSeen struct {
	rev   uint64
	since time.Time
}

// Enlist says the gateway is alive in reg, lists each session's task there
// from now on, and starts beating and sweeping every HeartbeatEvery until
// Close: the first sweep runs now. Call it after Attach and before the
// first session.
func (g *Gateway) Enlist(ctx context.Context, reg *Registry) error {
	if _, err := g.host(); err != nil {
		return err
	}
	l := &liveness{reg: reg, mine: map[string]bool{}, seen: map[string]beatSeen{}}
	if err := g.beat(ctx, l); err != nil {
		return err
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return errors.New("gateway: closed")
	}
	g.beats = l
	g.mu.Unlock()
	if _, err := g.Sweep(ctx); err != nil {
		g.log.Warn("gateway: sweeping the tasks of the gateways gone", "err", err)
	}
	g.wg.Go(func() { g.beatLoop(l) })
	g.wg.Go(func() { g.sweepLoop(nil) })
	return nil
}

func (g *Gateway) liveness() *liveness {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.beats
}

// beat puts the gateway's heartbeat, and unlists its tasks that ended.
func (g *Gateway) beat(ctx context.Context, l *liveness) error {
	if _, err := l.reg.kv.Put(ctx, beatKey(g.queue), []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("gateway: heartbeat: %w", err)
	}
	l.mu.Lock()
	ended := l.ended
	l.ended = nil
	l.mu.Unlock()
	for i, task := range ended {
		if err := l.reg.kv.Delete(ctx, taskKey(g.queue, task)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			l.mu.Lock()
			l.ended = append(l.ended, ended[i:]...)
			l.mu.Unlock()
			return fmt.Errorf("gateway: unlisting task %s: %w", task, err)
		}
		l.mu.Lock()
		delete(l.mine, task)
		l.mu.Unlock()
	}
	return nil
}

// beatLoop beats every HeartbeatEvery until Close. It is apart from the
// sweeps, so that a long sweep never delays a beat.
func (g *Gateway) beatLoop(l *liveness) {
	t := time.NewTicker(g.opts.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), g.opts.HeartbeatEvery)
			if err := g.beat(ctx, l); err != nil {
				g.log.Warn("gateway: a heartbeat failed; other gateways take this one for gone after "+g.opts.GoneAfter.String(), "err", err)
			}
			cancel()
		}
	}
}

// sweepLoop sweeps every HeartbeatEvery until Close, which cancels a
// sweep under way. ready, if set, is asked first each time, and the sweep
// skipped when it says no (a sweeper whose registry does not exist yet).
func (g *Gateway) sweepLoop(ready func(context.Context) bool) {
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	g.wg.Go(func() {
		select {
		case <-g.stop:
			cancelBase()
		case <-base.Done():
		}
	})
	t := time.NewTicker(g.opts.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-base.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(base, g.opts.GoneAfter)
			if ready == nil || ready(ctx) {
				if _, err := g.Sweep(ctx); err != nil && base.Err() == nil {
					g.log.Warn("gateway: sweeping the tasks of the gateways gone", "err", err)
				}
			}
			cancel()
		}
	}
}

// enlist lists a session's task before it is submitted, so that no task
// of the gateway's queue is ever unknown to the sweepers.
func (g *Gateway) enlist(ctx context.Context, task string) error {
	l := g.liveness()
	if l == nil {
		return nil
	}
	if _, err := l.reg.kv.Put(ctx, taskKey(g.queue, task), nil); err != nil {
		return fmt.Errorf("listing the session's task in %s: %w", RegistryBucket("<prefix>"), err)
	}
	l.mu.Lock()
	l.mine[task] = true
	l.mu.Unlock()
	return nil
}

// unlist notes that one of the gateway's tasks ended (from the tap, which
// must not block): the next beat deletes its key.
func (g *Gateway) unlist(task string) {
	l := g.liveness()
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mine[task] {
		l.ended = append(l.ended, task)
	}
}

// unbeat deletes the gateway's heartbeat as it closes: its tasks still
// open (a call waiting for an approval) are swept at once by the next
// gateway's sweep.
func (g *Gateway) unbeat() {
	l := g.liveness()
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = g.beat(ctx, l) // unlists the tasks that ended
	if err := l.reg.kv.Delete(ctx, beatKey(g.queue)); err != nil {
		g.log.Warn("gateway: deleting the heartbeat", "err", err)
	}
}

// SweepReason is the start of the reason recorded on a task swept.
const SweepReason = "its client session ended with its gateway"

// Sweep cancels the tasks listed under the gateways that are gone, each
// with a TaskCancelled saying which gateway and why, and returns them.
// A task whose dispatcher row is not on the queue it is listed under is
// not touched (only its key is removed): a key in the bucket cannot get
// any other task cancelled.
func (g *Gateway) Sweep(ctx context.Context) ([]string, error) {
	l := g.liveness()
	if l == nil {
		return nil, errors.New("gateway: not enlisted")
	}
	if _, err := g.host(); err != nil {
		return nil, err
	}
	beats, tasks, err := l.list(ctx)
	if err != nil {
		return nil, err
	}
	queues := make(map[string]bool, len(beats)+len(tasks))
	for q := range beats {
		queues[q] = true
	}
	for q := range tasks {
		queues[q] = true
	}
	delete(queues, g.queue)
	// The listing may miss a heartbeat put while it ran (history 1: the
	// revision it was to send is gone): each heartbeat is asked for
	// itself, and a gateway whose heartbeat cannot be read is taken for
	// alive.
	var errs []error
	for queue := range queues {
		rev, ok, err := l.beatRevision(ctx, queue)
		switch {
		case err != nil:
			errs = append(errs, err)
			delete(queues, queue)
		case ok:
			beats[queue] = rev
		default:
			delete(beats, queue)
		}
	}
	now := time.Now()
	gone := map[string]string{} // queue → why
	seen := make(map[string]beatSeen, len(queues))
	l.mu.Lock()
	for queue := range queues {
		rev, ok := beats[queue]
		if !ok {
			gone[queue] = "it has no heartbeat"
			continue
		}
		s, was := l.seen[queue]
		if !was || s.rev != rev {
			s = beatSeen{rev: rev, since: now}
		}
		seen[queue] = s
		if d := now.Sub(s.since); d >= g.opts.GoneAfter {
			gone[queue] = "no heartbeat for " + d.Round(time.Millisecond).String()
		}
	}
	l.seen = seen
	l.mu.Unlock()

	var swept []string
	for queue, why := range gone {
		left := 0
		for _, task := range tasks[queue] {
			ok, err := g.sweepTask(ctx, queue, task, why)
			if err != nil {
				errs = append(errs, err)
				left++
				continue
			}
			if ok {
				swept = append(swept, task)
			}
		}
		if rev, ok := beats[queue]; ok && left == 0 {
			// Only the beat seen: one put since means the gateway is back.
			if err := l.reg.kv.Delete(ctx, beatKey(queue), jetstream.LastRevision(rev)); err != nil {
				g.log.Debug("gateway: the heartbeat of a gateway swept was not deleted", "queue", queue, "err", err)
			}
		}
	}
	return swept, errors.Join(errs...)
}

// sweepTask cancels one task of a gateway gone and unlists it.
func (g *Gateway) sweepTask(ctx context.Context, queue, task, why string) (bool, error) {
	h, err := g.host()
	if err != nil {
		return false, err
	}
	l := g.liveness()
	ds, err := h.Dispatch(ctx, task)
	switch {
	case errors.Is(err, eventlog.ErrNotFound):
		// Listed, never submitted (the gateway died in between).
	case err != nil:
		return false, fmt.Errorf("gateway: sweeping task %s: %w", task, err)
	case ds.Queue != queue:
		g.log.Warn("gateway: a task listed under a gateway is not on its queue; left alone", "task", task, "listed", queue, "queue", ds.Queue)
	case ds.Status == eventlog.DispatchTerminal:
	default:
		reason := fmt.Sprintf("%s: the gateway %s is gone (%s)", SweepReason, queue, why)
		done, err := h.Cancel(ctx, task, reason, false)
		if err != nil {
			return false, fmt.Errorf("gateway: sweeping task %s of gateway %s: %w", task, queue, err)
		}
		if len(done) > 0 {
			g.log.Info("gateway: a task of a gateway gone was cancelled", "task", task, "queue", queue, "why", why)
		}
		if err := l.reg.kv.Delete(ctx, taskKey(queue, task)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			g.log.Warn("gateway: unlisting a task swept", "task", task, "err", err)
		}
		return len(done) > 0, nil
	}
	if err := l.reg.kv.Delete(ctx, taskKey(queue, task)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, fmt.Errorf("gateway: unlisting task %s: %w", task, err)
	}
	return false, nil
}

// beatRevision is the revision of queue's heartbeat, and whether there is
// one.
func (l *liveness) beatRevision(ctx context.Context, queue string) (uint64, bool, error) {
	e, err := l.reg.kv.Get(ctx, beatKey(queue))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("gateway: reading the heartbeat of %s: %w", queue, err)
	}
	return e.Revision(), true, nil
}

// list reads the registry: each gateway's heartbeat revision, and the
// tasks listed under each queue.
func (l *liveness) list(ctx context.Context) (beats map[string]uint64, tasks map[string][]string, err error) {
	// Every key: one filter, $KV.<bucket>.>, which deploy/nats's engine
	// role names (two filters make a consumer the role cannot name).
	w, err := l.reg.kv.WatchAll(ctx, jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: reading the registry: %w", err)
	}
	defer func() { _ = w.Stop() }()
	beats, tasks = map[string]uint64{}, map[string][]string{}
	for n := 0; n < maxListed; n++ {
		var e jetstream.KeyValueEntry
		select {
		case e = <-w.Updates():
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("gateway: reading the registry: %w", ctx.Err())
		}
		if e == nil {
			break
		}
		key := e.Key()
		switch {
		case strings.HasPrefix(key, "g."+queuePrefix):
			beats[key[2:]] = e.Revision()
		case strings.HasPrefix(key, "t."):
			queue, task, ok := strings.Cut(key[2:], ".")
			if ok && strings.HasPrefix(queue, queuePrefix) && task != "" {
				tasks[queue] = append(tasks[queue], task)
			}
		}
	}
	return beats, tasks, nil
}

// queuePrefix starts every gateway's queue.
const queuePrefix = "gateway-"

// Sweeper sweeps the tasks of the gateways gone from a process that runs
// no gateway (engine serve without --gateway): where no gateway is left
// running, a dead one's tasks would otherwise wait for the next gateway to
// start. It never says it is alive and lists no task of its own.
type Sweeper struct {
	g *Gateway
}

// StartSweeper sweeps with h every o.HeartbeatEvery, taking a gateway
// for gone after o.GoneAfter, until Close (o's other fields are unused).
// The registry is bound when it exists: a deployment where no gateway ever
// ran has no bucket, and none is made for it.
func StartSweeper(h *host.Host, nc *nats.Conn, prefix string, o Options) *Sweeper {
	g := New(Options{Logger: o.Logger, HeartbeatEvery: o.HeartbeatEvery, GoneAfter: o.GoneAfter})
	g.h = h
	g.wg.Go(func() {
		g.sweepLoop(func(ctx context.Context) bool {
			if g.liveness() != nil {
				return true
			}
			reg, ok := bindRegistry(ctx, nc, prefix)
			if !ok {
				return false
			}
			g.mu.Lock()
			g.beats = &liveness{reg: reg, mine: map[string]bool{}, seen: map[string]beatSeen{}}
			g.mu.Unlock()
			return true
		})
	})
	return &Sweeper{g: g}
}

// Close stops the sweeps, a sweep under way too.
func (s *Sweeper) Close() {
	s.g.mu.Lock()
	if !s.g.closed {
		s.g.closed = true
		close(s.g.stop)
	}
	s.g.mu.Unlock()
	s.g.wg.Wait()
}

// bindRegistry binds the gateways' bucket if it exists.
func bindRegistry(ctx context.Context, nc *nats.Conn, prefix string) (*Registry, bool) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, false
	}
	kv, err := js.KeyValue(ctx, RegistryBucket(prefix))
	if err != nil {
		return nil, false
	}
	return &Registry{kv: kv}, true
}
