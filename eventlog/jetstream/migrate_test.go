package jetstream_test

import (
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

// legacyWakeStream is the wake stream of the layout before the split, as
// that version created it: wakes, schedules and fired timers on
// <prefix>.wake.>, roll-ups allowed.
func legacyWakeStream(prefix string) natsjs.StreamConfig {
	return natsjs.StreamConfig{
		Name:              strings.ToUpper(prefix) + "_WAKE",
		Description:       "noeta wake ingress: wakes for tasks, and timer schedules the broker fires into it",
		Subjects:          []string{prefix + ".wake.>"},
		Retention:         natsjs.LimitsPolicy,
		Storage:           natsjs.FileStorage,
		Replicas:          1,
		MaxAge:            jetstream.DefaultWakeMaxAge,
		Discard:           natsjs.DiscardOld,
		AllowMsgSchedules: true,
		AllowMsgTTL:       true,
		AllowRollup:       true,
		MaxMsgs:           -1,
		MaxBytes:          -1,
	}
}

// TestMigrateLegacyWakeStream: a store whose wake stream has the layout
// before the split opens with nothing lost. Its unapplied wakes (an event,
// a human's answer) are applied, one already applied is not applied again,
// a timer armed there still fires, and wakes published afterwards to the
// new ingress are applied (its sequence numbers continue the old ones, which
// the rows remember). Without the migration, a Dispatcher of the split
// layout refused to open such a store (ErrConfigMismatch), and deleting the
// old stream by hand lost what waited in it.
func TestMigrateLegacyWakeStream(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	ctx := t.Context()
	cfg := testDispatcherConfig(1, prefix)
	cfg.SweepInterval = -1 // the migration itself must re-arm the timers
	d1, err := jetstream.OpenDispatcher(ctx, nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	suspend := func(cond noeta.Wake) (string, eventlog.Lease) {
		task := noeta.NewTaskID()
		mustEnqueue(t, d1, task, eventlog.EnqueueOptions{Queue: testQueue()})
		l := mustLease(t, d1, eventlog.LeaseRequest{Worker: "w", Task: task})
		if err := d1.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond}); err != nil {
			t.Fatal(err)
		}
		return task, l
	}
	event := noeta.ExternalWake("deploy")
	taskW, _ := suspend(event)
	human := noeta.HumanResponseWake("approval-" + noeta.NewID())
	taskA, _ := suspend(human)
	applied := noeta.ExternalWake("applied-before")
	taskX, _ := suspend(applied)
	timer := noeta.TimerWake(time.Now().Add(3 * time.Second))
	taskT, lT := suspend(timer)
	_ = d1.Close()

	// The old layout, in place of the new one, as the version before left it.
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	up := strings.ToUpper(prefix)
	for _, s := range []string{up + "_WAKE", up + "_TIMERS"} {
		if err := js.DeleteStream(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	old, err := js.CreateStream(ctx, legacyWakeStream(prefix))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, old.CachedInfo().Config.Name, natsjs.ConsumerConfig{
		Durable: "dispatcher-ingress", FilterSubject: prefix + ".wake.*.*",
		AckPolicy: natsjs.AckExplicitPolicy, DeliverPolicy: natsjs.DeliverAllPolicy, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	pub := func(subject string, w noeta.Wake) {
		t.Helper()
		if _, err := js.Publish(ctx, subject, wakeJSON(t, w)); err != nil {
			t.Fatal(err)
		}
	}
	// Applied and acknowledged by the old version (below the ack floor):
	// its row was not changed here, so applying it again would show.
	pub(jetstream.WakeSubject(prefix, taskX), applied)
	m, err := cons.Next(natsjs.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	ev := event.Clone()
	ev.Data = []byte(`{"version":"1.2.3"}`)
	pub(jetstream.WakeSubject(prefix, taskW), ev)
	answer := human.Clone()
	answer.Decision, answer.Approver = "approve", "alice"
	pub(jetstream.WakeSubject(prefix, taskA), answer)
	// The timer's schedule, as the old version armed it.
	sched := nats.NewMsg(prefix + ".wake." + strconv.Itoa(jetstream.Partition(taskT)) + "." + taskT + ".timer." + strconv.FormatUint(lT.Generation, 10))
	sched.Header.Set("Noeta-Timer-Generation", strconv.FormatUint(lT.Generation, 10))
	sched.Header.Set("Nats-TTL", "never")
	sched.Data = wakeJSON(t, timer)
	if _, err := js.PublishMsg(ctx, sched, natsjs.WithScheduleAt(timer.FireAt.Add(time.Second).Truncate(time.Second)),
		natsjs.WithScheduleTarget(jetstream.WakeSubject(prefix, taskT))); err != nil {
		t.Fatal(err)
	}
	oldInfo, err := old.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}

	d2, err := jetstream.OpenDispatcher(ctx, connect(t, singleURL), cfg)
	if err != nil {
		t.Fatalf("open a store of the old layout: %v", err)
	}
	t.Cleanup(func() { _ = d2.Close() })

	if st := mustInspect(t, d2, taskW); st.Status != eventlog.DispatchReady || st.MatchedWake == nil || !st.MatchedWake.Equal(ev) {
		t.Errorf("the unapplied event: task is %s matched %v, want ready with %v", st.Status, st.MatchedWake, ev)
	}
	answer.Auth = noeta.AuthNone
	if st := mustInspect(t, d2, taskA); st.Status != eventlog.DispatchReady || st.MatchedWake == nil || !receivedAs(*st.MatchedWake, answer) {
		t.Errorf("the unapplied answer: task is %s matched %v, want ready with %v", st.Status, st.MatchedWake, answer)
	}
	if st := mustInspect(t, d2, taskX); st.Status != eventlog.DispatchSuspended || st.MatchedWake != nil {
		t.Errorf("the wake applied before: task is %s matched %v, want still suspended (not applied again)", st.Status, st.MatchedWake)
	}
	waitFor(t, 20*time.Second, "the armed timer fired", func() error {
		st := mustInspect(t, d2, taskT)
		if st.Status != eventlog.DispatchReady || st.MatchedWake == nil || !st.MatchedWake.Equal(timer) {
			return fmt.Errorf("%s matched %v", st.Status, st.MatchedWake)
		}
		return nil
	})

	// Today's layout, continuing the old sequence.
	for _, c := range []natsjs.StreamConfig{jetstream.WakeStreamConfig(cfg), jetstream.TimerStreamConfig(cfg)} {
		s, err := js.Stream(ctx, c.Name)
		if err != nil {
			t.Fatalf("stream %s after the migration: %v", c.Name, err)
		}
		got := s.CachedInfo()
		if got.Config.Retention != c.Retention || got.Config.AllowRollup != c.AllowRollup || got.Config.AllowMsgSchedules != c.AllowMsgSchedules {
			t.Errorf("stream %s: got %+v, want %+v", c.Name, got.Config, c)
		}
		if c.Name == up+"_WAKE" && got.State.FirstSeq <= oldInfo.State.LastSeq {
			t.Errorf("the new wake stream starts at %d, want past the old one's last %d", got.State.FirstSeq, oldInfo.State.LastSeq)
		}
	}
	// A wake to the new ingress is applied, not taken for one applied before.
	l := mustLease(t, d2, eventlog.LeaseRequest{Worker: "w", Task: taskW})
	again := noeta.ExternalWake("again")
	if err := d2.Release(ctx, l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &again, ConsumedWake: l.Wake}); err != nil {
		t.Fatal(err)
	}
	pub(jetstream.WakeSubject(prefix, taskW), again)
	waitFor(t, 20*time.Second, "a wake on the new ingress", statusOf(t, d2, taskW, eventlog.DispatchReady))
}

// TestMigrationCutShortAfterDelete: a migration that deleted the old wake
// stream and died before creating the new one is finished by the next
// Dispatcher, whose new ingress still continues the old sequence (noted on
// the timers stream before the delete). Had it started at 1, a new wake
// could carry a sequence its row remembers as applied, and be dropped as a
// redelivery.
func TestMigrationCutShortAfterDelete(t *testing.T) {
	t.Parallel()
	prefix := uniquePrefix(t, singleURL)
	nc := connect(t, singleURL)
	cfg := testDispatcherConfig(1, prefix)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	timers := jetstream.TimerStreamConfig(cfg)
	timers.Metadata = map[string]string{"noeta_wake_first_seq": "1000"}
	if _, err := js.CreateStream(t.Context(), timers); err != nil {
		t.Fatal(err)
	}
	d, err := jetstream.OpenDispatcher(t.Context(), nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	s, err := js.Stream(t.Context(), strings.ToUpper(prefix)+"_WAKE")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.FirstSeq; got != 1000 {
		t.Errorf("the wake stream created after the cut-short migration starts at %d, want 1000", got)
	}
}
