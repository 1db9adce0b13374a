package eventlog

import (
	"context"
	"sync"
	"sync/atomic"
)

// SubscriptionStats counts what a subscription's handler did.
type SubscriptionStats struct {
	Delivered uint64 // handler calls
	Failed    uint64 // calls that returned an error
	Panicked  uint64 // calls that panicked
}

// Subscription is one handler registered with a [Subscriber].
type Subscription struct {
	set     *Subscribers
	h       Handler
	once    sync.Once
	stopped atomic.Bool

	delivered, failed, panicked atomic.Uint64
}

// Cancel stops delivery. It is safe to call more than once and concurrently;
// a delivery already running finishes.
func (s *Subscription) Cancel() {
	s.once.Do(func() {
		s.stopped.Store(true)
		if s.set != nil {
			s.set.remove(s)
		}
	})
}

// Stopped reports whether Cancel was called.
func (s *Subscription) Stopped() bool { return s.stopped.Load() }

// Stats returns the counts so far.
func (s *Subscription) Stats() SubscriptionStats {
	return SubscriptionStats{Delivered: s.delivered.Load(), Failed: s.failed.Load(), Panicked: s.panicked.Load()}
}

func (s *Subscription) deliver(ctx context.Context, env Envelope) {
	if s.stopped.Load() {
		return
	}
	s.delivered.Add(1)
	defer func() {
		if r := recover(); r != nil {
			s.panicked.Add(1)
		}
	}()
	if err := s.h(ctx, env); err != nil {
		s.failed.Add(1)
	}
}

// Subscribers is the subscriber list a backend embeds to implement
// [Subscriber]. Notify reads an immutable snapshot, so the writer's path takes
// no lock and a handler may subscribe or cancel from inside a delivery.
type Subscribers struct {
	mu   sync.Mutex // serialises changes to list
	list atomic.Pointer[[]*Subscription]
}

// Subscribe registers h.
func (ss *Subscribers) Subscribe(h Handler) *Subscription {
	s := &Subscription{set: ss, h: h}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var next []*Subscription
	if cur := ss.list.Load(); cur != nil {
		next = append(next, *cur...)
	}
	next = append(next, s)
	ss.list.Store(&next)
	return s
}

func (ss *Subscribers) remove(s *Subscription) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	cur := ss.list.Load()
	if cur == nil {
		return
	}
	next := make([]*Subscription, 0, len(*cur))
	for _, x := range *cur {
		if x != s {
			next = append(next, x)
		}
	}
	ss.list.Store(&next)
}

// Len returns the number of live subscriptions.
func (ss *Subscribers) Len() int {
	if cur := ss.list.Load(); cur != nil {
		return len(*cur)
	}
	return 0
}

// Notify delivers envs, in order, to every subscription, in subscription order.
// Call it after the records are durable and outside every lock. ctx's
// cancellation is not passed on (see [Handler]).
func (ss *Subscribers) Notify(ctx context.Context, envs ...Envelope) {
	cur := ss.list.Load()
	if cur == nil || len(*cur) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	for _, env := range envs {
		for _, s := range *cur {
			s.deliver(ctx, env.Clone())
		}
	}
}
