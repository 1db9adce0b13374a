package jetstream_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// streamMsgs is how many messages stream holds now.
func streamMsgs(t *testing.T, js natsjs.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestWakeStreamRefusesRollup: a publisher of wakes (or an approver) that
// sends Nats-Rollup: all, or asks for a purge or a delete, removes nothing.
// Before the split the wake stream allowed roll-ups for the timers'
// schedules, so one such publish purged every wake waiting in it.
func TestWakeStreamRefusesRollup(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d, err := jetstream.OpenDispatcher(t.Context(), nc, testDispatcherConfig(1, prefix))
	if err != nil {
		t.Fatal(err)
	}
	// Closed: nothing consumes, so what is published stays to be counted.
	_ = d.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := strings.ToUpper(prefix) + "_WAKE"
	task := noeta.NewTaskID()
	approve, err := jetstream.ApproveSubject(prefix, "alice", task)
	if err != nil {
		t.Fatal(err)
	}
	wakeSubj := jetstream.WakeSubject(prefix, task)
	for i := range 3 {
		if _, err := js.Publish(t.Context(), wakeSubj, wakeJSON(t, noeta.ExternalWake("e"+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(t.Context(), approve, wakeJSON(t, noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "h", Decision: "approve"})); err != nil {
		t.Fatal(err)
	}
	const held = 4
	if n := streamMsgs(t, js, stream); n != held {
		t.Fatalf("messages before: got %d, want %d", n, held)
	}
	for _, tc := range []struct{ subject, rollup string }{
		{wakeSubj, "all"}, {wakeSubj, "sub"}, {approve, "all"}, {approve, "sub"},
	} {
		m := nats.NewMsg(tc.subject)
		m.Header.Set("Nats-Rollup", tc.rollup)
		m.Data = wakeJSON(t, noeta.ExternalWake("purge"))
		if _, err := js.PublishMsg(t.Context(), m); err == nil {
			t.Errorf("publish with Nats-Rollup: %s on %s: accepted, want refused", tc.rollup, tc.subject)
		}
		if n := streamMsgs(t, js, stream); n != held {
			t.Errorf("after Nats-Rollup: %s on %s: %d messages, want %d", tc.rollup, tc.subject, n, held)
		}
	}
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(t.Context()); err == nil {
		t.Errorf("purge: accepted, want refused")
	}
	if err := s.DeleteMsg(t.Context(), 1); err == nil {
		t.Errorf("delete a message: accepted, want refused")
	}
	if n := streamMsgs(t, js, stream); n != held {
		t.Errorf("after purge and delete: %d messages, want %d", n, held)
	}
}

// TestWakeFloodRefusedPastCap: wakes to one task past its buffer are held in
// the wake stream, and once its subject holds the cap the broker refuses the
// sender with an error; the row never grows past the cap. Before the cap,
// each wake grew the row, without end, until a write was over the server's
// largest message. Once the task consumes a buffered wake, a held one is
// applied and the subject takes a wake again.
func TestWakeFloodRefusedPastCap(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	const limit = 4
	cfg := testDispatcherConfig(1, prefix)
	cfg.MaxPendingWakes = limit
	d, err := jetstream.OpenDispatcher(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	task := noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: testQueue()})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
	subj := jetstream.WakeSubject(prefix, task)
	publish := func(kind string) error {
		_, err := js.Publish(t.Context(), subj, wakeJSON(t, noeta.ExternalWake(kind)))
		return err
	}
	for i := range limit {
		if err := publish("buffered-" + strconv.Itoa(i)); err != nil {
			t.Fatalf("wake %d of the buffer: %v", i, err)
		}
	}
	waitFor(t, 20*time.Second, "the buffer full", func() error {
		if st := mustInspect(t, d, task); st.PendingWakes != limit {
			return fmt.Errorf("%d pending", st.PendingWakes)
		}
		return nil
	})
	for i := range limit {
		if err := publish("held-" + strconv.Itoa(i)); err != nil {
			t.Fatalf("wake %d held in the stream: %v", i, err)
		}
	}
	waitFor(t, 20*time.Second, "a wake held", func() error {
		if n := d.Stats().HeldWakes; n == 0 {
			return errors.New("none held")
		}
		return nil
	})
	err = publish("one too many")
	if err == nil || !strings.Contains(err.Error(), "maximum messages per subject") {
		t.Fatalf("publish past the cap: got %v, want the broker's refusal (maximum messages per subject)", err)
	}
	wp, err := jetstream.NewWakePublisher(nc, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = wp.Wake(t.Context(), task, noeta.ExternalWake("through the publisher")); !errors.Is(err, eventlog.ErrTooManyWakes) {
		t.Fatalf("WakePublisher past the cap: got %v, want ErrTooManyWakes", err)
	}
	if st := mustInspect(t, d, task); st.PendingWakes != limit {
		t.Errorf("PendingWakes: got %d, want %d", st.PendingWakes, limit)
	}
	t.Logf("refused with: %v", err)

	// Consuming one buffered wake lets a held one in, and frees a place.
	cond := noeta.ExternalWake("buffered-0")
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a held wake applied", func() error {
		if err := publish("after"); err != nil {
			return err
		}
		return nil
	})
}

// TestForgedTimerOnIngressDropped: a publisher of wakes that sends a
// timer's condition with the timer header on the wake ingress fires
// nothing. Before the split, fired timers arrived on the ingress, and a
// message there with the header and the condition of a task's suspend
// (generation and deadline are in its dispatcher row, readable with
// Inspect) was applied as the broker's firing: any waker could fire a
// timer early, or, had approvals expired that way, expire an approval.
func TestForgedTimerOnIngressDropped(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	d, err := jetstream.OpenDispatcher(t.Context(), nc, testDispatcherConfig(1, prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	expiring := noeta.HumanResponseWake("approval-" + noeta.NewID())
	expiring.ExpireAt = time.Now().Add(time.Hour).UTC().Round(0)
	for _, cond := range []noeta.Wake{noeta.TimerWake(time.Now().Add(time.Hour)), expiring} {
		t.Run(string(cond.Kind), func(t *testing.T) {
			task := noeta.NewTaskID()
			mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: testQueue()})
			l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
			if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
				t.Fatal(err)
			}
			before := d.Stats().InvalidWakes
			m := nats.NewMsg(jetstream.WakeSubject(prefix, task))
			m.Header.Set("Noeta-Timer-Generation", strconv.FormatUint(l.Generation, 10))
			m.Data = wakeJSON(t, cond)
			if _, err := js.PublishMsg(t.Context(), m); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "the forgery dropped", func() error {
				if n := d.Stats().InvalidWakes - before; n != 1 {
					return fmt.Errorf("invalid wakes: %d", n)
				}
				return nil
			})
			if st := mustInspect(t, d, task); st.Status != eventlog.DispatchSuspended || st.MatchedWake != nil {
				t.Errorf("after the forged timer: task is %s matched %v, want still suspended", st.Status, st.MatchedWake)
			}
		})
	}
}
