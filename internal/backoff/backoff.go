// Package backoff is the one pause of the runtime's poll and retry loops:
// a wait that doubles from a first pause to a bound, optionally jittered,
// and ends early with the context. Every loop that waits for something to
// settle (an answer applied, a lease to take, a server to come up) uses it,
// so that each is bounded the same way and none spins.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Pause is the pause of one loop. Not safe for concurrent use: a loop owns
// its Pause.
type Pause struct {
	next, max time.Duration
	jitter    bool
}

// New returns a pause of first, doubled after every Wait up to bound. A bound
// below first is first: a constant pause.
func New(first, bound time.Duration) *Pause {
	return &Pause{next: first, max: max(first, bound)}
}

// Jittered makes every wait a random one between half the pause and the
// pause, so that many processes retrying at once spread out.
func (p *Pause) Jittered() *Pause {
	p.jitter = true
	return p
}

// Next is the pause the next Wait takes before jitter.
func (p *Pause) Next() time.Duration { return p.next }

// Wait waits the pause, then doubles it up to the bound. It returns
// context.Cause(ctx) when ctx ends first, nil otherwise.
func (p *Pause) Wait(ctx context.Context) error {
	d := p.Take()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// Take returns the wait the next Wait would take and advances the pause,
// for a loop that waits in a select of its own.
func (p *Pause) Take() time.Duration {
	d := p.next
	if p.jitter && d > 1 {
		d = d/2 + rand.N(d/2+1)
	}
	p.next = min(2*p.next, p.max)
	return d
}

// Reset starts the doubling again from first.
func (p *Pause) Reset(first time.Duration) { p.next = first }
