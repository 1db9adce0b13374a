package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// subjectCounts is how many messages each subject of the substrate's
// stream holds.
func subjectCounts(t *testing.T, s *substrateSystem) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, substrateStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(substrateStream+".>"))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}

// A run of the floor writes steps+2 messages to a subject of its own, on a
// real embedded server, and counts them.
func TestSubstrateRun(t *testing.T) {
	ctx := context.Background()
	s, err := openSubstrate(ctx, t.TempDir(), 3, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for i := range 2 {
		if err := s.run(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	counts := subjectCounts(t, s)
	if len(counts) != 2 {
		t.Fatalf("subjects %v, want 2", counts)
	}
	for subj, n := range counts {
		if n != 5 {
			t.Errorf("%s holds %d messages, want 5", subj, n)
		}
	}
	if got := s.durableWrites(); got != 10 {
		t.Errorf("durableWrites %d, want 10", got)
	}
}

// The grouped floor's runs, many at once, each keep their
// compare-and-set chain, each write after the fence's reads; a batch stores its writes in one piece, and one failed check
// refuses all of it.
func TestGroupedSubstrate(t *testing.T) {
	ctx := context.Background()
	g, err := openGroupedSubstrate(ctx, t.TempDir(), 4, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() { errs <- g.run(ctx, i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	counts := subjectCounts(t, g.substrateSystem)
	if len(counts) != 16 {
		t.Fatalf("%d subjects, want 16", len(counts))
	}
	for subj, n := range counts {
		if n != 6 {
			t.Errorf("%s holds %d messages, want 6", subj, n)
		}
	}

	// The fenced floor reads before it writes: without the row, no write.
	if err := g.rows.Delete(ctx, fenceKey); err != nil {
		t.Fatal(err)
	}
	if err := g.run(ctx, 99); err == nil || !strings.Contains(err.Error(), "fence") {
		t.Errorf("a run without the row it reads: %v, want the fence's read failing", err)
	}

	// A batch sent directly: its sequences are consecutive, each write's
	// its own.
	mk := func(subj string, expect uint64) *substrateWrite {
		m := nats.NewMsg(subj)
		m.Data = []byte("x")
		return &substrateWrite{msg: m, expect: expect, done: make(chan struct{})}
	}
	batch := []*substrateWrite{mk(substrateStream+".b.1", 0), mk(substrateStream+".b.2", 0), mk(substrateStream+".b.3", 0)}
	g.sendBatch(batch)
	for i, w := range batch {
		<-w.done
		if w.err != nil {
			t.Fatalf("write %d: %v", i, w.err)
		}
		if i > 0 && w.seq != batch[i-1].seq+1 {
			t.Errorf("write %d at %d after %d: not consecutive", i, w.seq, batch[i-1].seq)
		}
	}
	groups, writes := g.groupedWrites()
	if groups == 0 || writes < 3 {
		t.Errorf("groupedWrites %d, %d: the batch is not counted", groups, writes)
	}

	// Fewer than groupMin go alone: a stale check fails only its own write.
	alone := []*substrateWrite{mk(substrateStream+".d.1", 0), mk(substrateStream+".b.2", 0), mk(substrateStream+".d.2", 0)}
	g.sendAlone(alone)
	for i, w := range alone {
		<-w.done
		if stale := i == 1; (w.err != nil) != stale {
			t.Errorf("lone write %d: %v (stale check: %v)", i, w.err, stale)
		}
	}
	if alone[0].err == nil && alone[2].err == nil && alone[2].seq <= alone[0].seq {
		t.Errorf("lone writes at %d and %d", alone[0].seq, alone[2].seq)
	}

	// A stale compare-and-set in the middle refuses the whole batch.
	stale := []*substrateWrite{mk(substrateStream+".c.1", 0), mk(substrateStream+".b.1", 0), mk(substrateStream+".c.2", 0)}
	g.sendBatch(stale)
	for i, w := range stale {
		<-w.done
		var apiErr *natsjs.APIError
		if !errors.As(w.err, &apiErr) {
			t.Errorf("write %d of a batch with a stale check: %v, want the server's refusal", i, w.err)
		}
	}
	for _, subj := range []string{substrateStream + ".c.1", substrateStream + ".c.2"} {
		if n := subjectCounts(t, g.substrateSystem)[subj]; n != 0 {
			t.Errorf("%s holds %d messages of a refused batch", subj, n)
		}
	}
	if n := subjectCounts(t, g.substrateSystem)[substrateStream+".b.1"]; n != 1 {
		t.Errorf("%s holds %d, want 1", substrateStream+".b.1", n)
	}
}

// A committer told to stop answers every write queued before it returns.
func TestGroupedSubstrateStopAnswersEveryWrite(t *testing.T) {
	ctx := context.Background()
	g, err := openGroupedSubstrate(ctx, t.TempDir(), 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	// A second committer of the same floor, not started: its queue is
	// filled, then it is stopped and run.
	h := &groupedSubstrate{substrateSystem: g.substrateSystem, q: make(chan *substrateWrite, 8), stop: make(chan struct{}), done: make(chan struct{})}
	var ws []*substrateWrite
	for i := range 3 {
		m := nats.NewMsg(substrateStream + ".e." + strconv.Itoa(i))
		w := &substrateWrite{msg: m, done: make(chan struct{})}
		h.q <- w
		ws = append(ws, w)
	}
	close(h.stop)
	h.commit()
	for i, w := range ws {
		select {
		case <-w.done:
		default:
			t.Errorf("write %d left unanswered", i)
		}
	}
}
