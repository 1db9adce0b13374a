package nats_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/natsconn"
)

// scriptGated is a task of the gated agent: one echo call, which needs an
// approval, then the answer.
const scriptGated = `[{"tool_calls":[{"tool":"echo","args":{"x":1}}]},{"finish":{"answer":"approved"}}]`

// approvalsRun is what the approval subtests of TestCluster share.
type approvalsRun struct {
	ctx    context.Context
	urls   string
	e      *engineSide
	reader *jetstream.Reader
	// expected collects the subjects the subtests provoke violations on.
	expected *[]string
}

// openApprover opens a read-only host as an approver user, as engine
// approve --nats does.
func openApprover(t testing.TB, ctx context.Context, urls, user string) *hostconfig.Host {
	t.Helper()
	h, err := hostconfig.Open(ctx, hostconfig.Options{
		NATS:     natsconn.Options{URL: urls, User: user, Password: passwords[user]},
		ReadOnly: true, Name: "approve " + user,
	})
	if err != nil {
		t.Fatalf("open a read-only host as %s: %v", user, err)
	}
	t.Cleanup(h.Close)
	return h
}

// askApproval submits a gated task and returns it with the handle of the
// approval it waits on, once its row is suspended on it.
func (a approvalsRun) askApproval(t testing.TB, nc *nats.Conn) (string, string) {
	t.Helper()
	id := a.e.submit(t, "gated", "needs an approval", scriptGated)
	st := waitFold(t, foldRead(a.reader), id, time.Minute, "the approval request", suspendedOn(noeta.WakeHumanResponse))
	waitRowSuspended(t, nc, id, time.Minute)
	return id, st.WakeOn.Handle
}

// answers returns the ApprovalResolved and ApprovalRefused records of
// task's request handle.
func (a approvalsRun) answers(t testing.TB, task, handle string) (resolved []noeta.ApprovalResolved, refused []noeta.ApprovalRefused) {
	t.Helper()
	envs, err := a.reader.Read(a.ctx, task, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range envs {
		p, ok, err := env.Decode()
		if err != nil || !ok {
			continue
		}
		switch r := p.(type) {
		case *noeta.ApprovalResolved:
			if r.Handle == handle {
				resolved = append(resolved, *r)
			}
		case *noeta.ApprovalRefused:
			if r.Handle == handle {
				refused = append(refused, *r)
			}
		}
	}
	return resolved, refused
}

// stillPending checks that task waits on handle, unanswered, in its log and
// in its row.
func (a approvalsRun) stillPending(t testing.TB, nc *nats.Conn, task, handle string) {
	t.Helper()
	waitRowSuspended(t, nc, task, time.Minute)
	st := waitFold(t, foldRead(a.reader), task, time.Minute, "the request still pending", suspendedOn(noeta.WakeHumanResponse))
	if st.WakeOn.Handle != handle {
		t.Errorf("task %s waits on %s, want %s", task, st.WakeOn.Handle, handle)
	}
	if resolved, _ := a.answers(t, task, handle); len(resolved) != 0 {
		t.Errorf("task %s: %s was resolved: %+v", task, handle, resolved)
	}
}

// approve answers task's handle as alice and waits for the task to end.
func (a approvalsRun) approve(t testing.TB, task, handle string) {
	t.Helper()
	h := openApprover(t, a.ctx, a.urls, "alice")
	if err := h.Approve(a.ctx, task, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "alice", Reason: "checked"}); err != nil {
		t.Fatalf("alice approves %s of %s: %v", handle, task, err)
	}
	waitFold(t, foldRead(a.reader), task, time.Minute, "the end", terminal)
}

// approverAnswers: an approver user answers on its own approval subject;
// ApprovalResolved records its name, auth nats and its reason, and the call
// runs.
func (a approvalsRun) approverAnswers(t *testing.T) {
	anc, _ := connect(t, a.urls, "alice")
	id, handle := a.askApproval(t, anc)
	h := openApprover(t, a.ctx, a.urls, "alice")
	// The approver finds it in the waiting index, which it may only read.
	listed := func() bool {
		ws, err := h.Waiting(a.ctx)
		if err != nil {
			t.Fatalf("alice lists what waits: %v", err)
		}
		return slices.ContainsFunc(ws, func(w eventlog.Waiting) bool { return w.Task == id && w.Handle == handle })
	}
	if !listed() {
		t.Errorf("%s of %s is not in the waiting index", handle, id)
	}
	if err := h.Approve(a.ctx, id, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "alice", Reason: "looks right"}); err != nil {
		t.Fatalf("alice approves: %v", err)
	}
	if st := waitFold(t, foldRead(a.reader), id, time.Minute, "the end", terminal); string(st.Answer) != `"approved"` {
		t.Errorf("the approved task ended with %s (%s)", st.Answer, st.Reason)
	}
	resolved, refused := a.answers(t, id, handle)
	if len(resolved) != 1 || len(refused) != 0 {
		t.Fatalf("answers of %s: resolved %+v, refused %+v; want one resolution", handle, resolved, refused)
	}
	if r := resolved[0]; r.Approver != "alice" || r.Auth != noeta.AuthNATS || r.Decision != noeta.ApprovalApprove || r.Reason != "looks right" {
		t.Errorf("ApprovalResolved %+v; want approve by alice, auth nats, reason \"looks right\"", r)
	}
	if listed() {
		t.Errorf("%s of %s is still in the waiting index after it was resolved", handle, id)
	}
}

// approverUnderAnotherName: an approver user publishing on another
// approver's subject is refused by the broker, and nothing is recorded.
func (a approvalsRun) approverUnderAnotherName(t *testing.T) {
	anc, aerrs := connect(t, a.urls, "alice")
	id, handle := a.askApproval(t, anc)
	subj := fmt.Sprintf("noeta.approve.sre.%d.%s", noeta.Partition(id), id)
	*a.expected = append(*a.expected, subj)
	answer := noeta.HumanResponseWake(handle)
	answer.Decision, answer.Approver, answer.Text = string(noeta.ApprovalApprove), "sre", "as the team"
	body, err := noeta.Canonical(answer)
	if err != nil {
		t.Fatal(err)
	}
	// A plain publish, and a JetStream one.
	if err := anc.Publish(subj, body); err != nil {
		t.Fatal(err)
	}
	_ = anc.Flush()
	if aerrs.violation(subj, 10*time.Second) == nil {
		t.Errorf("no permissions violation for alice's publish to %s", subj)
	}
	ajs, err := natsjs.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(a.ctx, 2*time.Second)
	_, err = ajs.Publish(pctx, subj, body, natsjs.WithRetryAttempts(0))
	cancel()
	if err == nil {
		t.Errorf("alice's JetStream publish to %s succeeded", subj)
	}
	// Nor can she name herself sre through the host.
	h := openApprover(t, a.ctx, a.urls, "alice")
	pctx, cancel = context.WithTimeout(a.ctx, 3*time.Second)
	err = h.Approve(pctx, id, handle, host.Answer{Decision: noeta.ApprovalApprove, Approver: "sre"})
	cancel()
	if err == nil {
		t.Errorf("alice's host answered as sre")
	}
	a.stillPending(t, anc, id, handle)
	if _, refused := a.answers(t, id, handle); len(refused) != 0 {
		t.Errorf("refused attempts recorded: %+v; the broker refused them, nothing reached the engine", refused)
	}
	a.approve(t, id, handle)
}

// operatorCannotWake: the operator publishes no wake, an answer least of
// all.
func (a approvalsRun) operatorCannotWake(t *testing.T) {
	pnc, perrs := connect(t, a.urls, "operator")
	id, handle := a.askApproval(t, pnc)
	subj := fmt.Sprintf("noeta.wake.%d.%s", noeta.Partition(id), id)
	*a.expected = append(*a.expected, subj)
	wp, err := jetstream.NewWakePublisher(pnc, "")
	if err != nil {
		t.Fatal(err)
	}
	answer := noeta.HumanResponseWake(handle)
	answer.Decision, answer.Approver, answer.Text = string(noeta.ApprovalApprove), "operator", "yes"
	pctx, cancel := context.WithTimeout(a.ctx, 2*time.Second)
	_, err = wp.Wake(pctx, id, answer)
	cancel()
	if err == nil || perrs.violation(subj, 10*time.Second) == nil {
		t.Errorf("the operator's wake on %s: %v, want a permissions violation", subj, err)
	}
	a.stillPending(t, pnc, id, handle)
	a.approve(t, id, handle)
}

// plainWakeRefused: a plain wake carrying an approval (an observer's, which
// may publish events on the ingress) reaches the engine, which refuses it:
// ApprovalRefused with auth none, and the request stays pending.
func (a approvalsRun) plainWakeRefused(t *testing.T) {
	onc, _ := connect(t, a.urls, "observer")
	// The rows are read as an approver: an observer reads no bucket.
	anc, _ := connect(t, a.urls, "alice")
	id, handle := a.askApproval(t, anc)
	wp, err := jetstream.NewWakePublisher(onc, "")
	if err != nil {
		t.Fatal(err)
	}
	answer := noeta.HumanResponseWake(handle)
	answer.Decision, answer.Approver, answer.Text = string(noeta.ApprovalApprove), "alice", "trust me"
	if _, err := wp.Wake(a.ctx, id, answer); err != nil {
		t.Fatalf("the observer's wake: %v", err)
	}
	var refused []noeta.ApprovalRefused
	for deadline := time.Now().Add(time.Minute); len(refused) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no ApprovalRefused for %s of %s", handle, id)
		}
		_, refused = a.answers(t, id, handle)
	}
	if r := refused[0]; r.Approver != "alice" || r.Auth != noeta.AuthNone {
		t.Errorf("ApprovalRefused %+v; want the asserted approver alice with auth none", r)
	}
	a.stillPending(t, anc, id, handle)
	a.approve(t, id, handle)
}

// groupIsolation: an observer worker's user cannot delete, pull from or
// reconfigure another group's feed consumer, and consumes its own groups.
func (a approvalsRun) groupIsolation(t *testing.T, done string) {
	p := noeta.Partition(done)
	victim := fmt.Sprintf("obs-audit-p%02d", p)
	// The observer user's group obs-audit has its consumer on the task's
	// partition.
	onc, _ := connect(t, a.urls, "observer")
	ofeed, err := jetstream.OpenFeed(a.ctx, onc, jetstream.FeedOptions{Replicas: clusterReplicas})
	if err != nil {
		t.Fatal(err)
	}
	consume(t, a.ctx, ofeed, "obs-audit", done)

	cnc, cerrs := connect(t, a.urls, "compliance")
	cjs, err := natsjs.New(cnc)
	if err != nil {
		t.Fatal(err)
	}
	del := "$JS.API.CONSUMER.DELETE.NOETA_TASKS." + victim
	next := "$JS.API.CONSUMER.MSG.NEXT.NOETA_TASKS." + victim
	create := fmt.Sprintf("$JS.API.CONSUMER.CREATE.NOETA_TASKS.%s.noeta.t.%d.>", victim, p)
	*a.expected = append(*a.expected, del, next, create)
	pctx, cancel := context.WithTimeout(a.ctx, 2*time.Second)
	err = cjs.DeleteConsumer(pctx, "NOETA_TASKS", victim)
	cancel()
	if err == nil || cerrs.violation(del, 10*time.Second) == nil {
		t.Errorf("compliance deletes %s: %v, want a permissions violation", victim, err)
	}
	if _, err := cnc.Request(next, []byte(`{"batch":1,"expires":500000000}`), 2*time.Second); err == nil || cerrs.violation(next, 10*time.Second) == nil {
		t.Errorf("compliance pulls from %s: %v, want a permissions violation", victim, err)
	}
	cc := jetstream.FeedConsumerConfig("", "obs-audit", p, eventlog.FeedConfig{})
	cc.FilterSubject = fmt.Sprintf("noeta.t.%d.>", p)
	cc.Description = "hijacked"
	pctx, cancel = context.WithTimeout(a.ctx, 2*time.Second)
	_, err = cjs.CreateOrUpdateConsumer(pctx, "NOETA_TASKS", cc)
	cancel()
	if err == nil || cerrs.violation(create, 10*time.Second) == nil {
		t.Errorf("compliance updates %s: %v, want a permissions violation", victim, err)
	}
	pnc, _ := connect(t, a.urls, "operator")
	pjs, err := natsjs.New(pnc)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := pjs.Consumer(a.ctx, "NOETA_TASKS", victim); err != nil || c.CachedInfo().Config.Description == "hijacked" {
		t.Errorf("%s after compliance's attempts: %v", victim, err)
	}
	// Its own group, it consumes.
	cfeed, err := jetstream.OpenFeed(a.ctx, cnc, jetstream.FeedOptions{Replicas: clusterReplicas})
	if err != nil {
		t.Fatal(err)
	}
	consume(t, a.ctx, cfeed, "compliance-audit", done)
}

// consume runs group's feed on task's partition until it has delivered the
// task's first record.
func consume(t testing.TB, ctx context.Context, feed *jetstream.Feed, group, task string) {
	t.Helper()
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	got := make(chan struct{})
	var once bool
	errc := make(chan error, 1)
	go func() {
		errc <- feed.Consume(fctx, eventlog.FeedConfig{Group: group, Partitions: []int{noeta.Partition(task)}},
			func(_ context.Context, d eventlog.Delivery) error {
				if d.Env.Task == task && !once {
					once = true
					close(got)
				}
				return nil
			})
	}()
	select {
	case <-got:
	case err := <-errc:
		t.Fatalf("group %s: Consume ended: %v", group, err)
	case <-time.After(time.Minute):
		t.Fatalf("group %s delivered nothing of %s", group, task)
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatalf("group %s: %v", group, err)
	}
}

// rollupPurgesNothing: a wake publisher's Nats-Rollup header is refused by
// the wake stream, which allows no roll-ups, and it cannot reach the
// timers' stream at all: a timer armed before fires after.
//
// Before: NOETA_WAKE allowed roll-ups (its timer schedules needed them), so
// a wake publisher's `Nats-Rollup: all` purged every pending wake and
// armed timer.
func (a approvalsRun) rollupPurgesNothing(t *testing.T) {
	onc, oerrs := connect(t, a.urls, "observer")
	timer := a.e.submit(t, "boss", "a timer across the roll-up", `[{"wait_timer":{"seconds":2}},{"finish":{"answer":"later"}}]`)
	waitFold(t, foldRead(a.reader), timer, time.Minute, "the timer wait", suspendedOn(noeta.WakeTimerFired))
	// Armed once the row is suspended (rows are read as an approver).
	anc, _ := connect(t, a.urls, "alice")
	waitRowSuspended(t, anc, timer, time.Minute)
	ojs, err := natsjs.New(onc)
	if err != nil {
		t.Fatal(err)
	}
	wakeSubj := fmt.Sprintf("noeta.wake.%d.%s", noeta.Partition(timer), timer)
	for _, rollup := range []string{"all", "sub"} {
		body, err := noeta.Canonical(noeta.ExternalWake("rollup"))
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(wakeSubj)
		m.Data = body
		m.Header.Set("Nats-Rollup", rollup)
		pctx, cancel := context.WithTimeout(a.ctx, 5*time.Second)
		_, err = ojs.PublishMsg(pctx, m, natsjs.WithRetryAttempts(0))
		cancel()
		if err == nil {
			t.Errorf("a wake with Nats-Rollup: %s was accepted", rollup)
		}
	}
	// The timers' stream is the engine's alone.
	timerSubj := fmt.Sprintf("noeta.timer.%d.%s", noeta.Partition(timer), timer)
	*a.expected = append(*a.expected, timerSubj)
	m := nats.NewMsg(timerSubj)
	m.Header.Set("Nats-Rollup", "all")
	if err := onc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	_ = onc.Flush()
	if oerrs.violation(timerSubj, 10*time.Second) == nil {
		t.Errorf("no permissions violation for the observer's roll-up on %s", timerSubj)
	}
	if st := waitFold(t, foldRead(a.reader), timer, time.Minute, "the end", terminal); string(st.Answer) != `"later"` {
		t.Errorf("the timer task ended with %s (%s)", st.Answer, st.Reason)
	}
}

// floodRefused: wakes to one task that match nothing are held up to the
// cap (eventlog.DefaultMaxPendingWakes in the row, as many again on the
// stream); past it the broker refuses the publish and the sender gets an
// error.
//
// Before: the row's buffer grew with every wake until the row outgrew the
// server's maximum message size.
func (a approvalsRun) floodRefused(t *testing.T) {
	onc, _ := connect(t, a.urls, "observer")
	id := a.e.submit(t, "boss", "flooded", scriptExternal)
	waitFold(t, foldRead(a.reader), id, time.Minute, "the external wait", suspendedOn(noeta.WakeExternalEvent))
	wp, err := jetstream.NewWakePublisher(onc, "")
	if err != nil {
		t.Fatal(err)
	}
	limit := 2*eventlog.DefaultMaxPendingWakes + 1
	var sent int
	for sent = 0; sent < 10*limit; sent++ {
		pctx, cancel := context.WithTimeout(a.ctx, 5*time.Second)
		_, err = wp.Wake(pctx, id, noeta.ExternalWake(fmt.Sprintf("noise-%d", sent)))
		cancel()
		if err != nil {
			break
		}
	}
	if err == nil {
		t.Fatalf("%d wakes to one task were all accepted", sent)
	}
	if sent > limit {
		t.Errorf("the first refusal came after %d wakes, want at most %d", sent, limit)
	}
	if !errors.Is(err, eventlog.ErrTooManyWakes) || !strings.Contains(err.Error(), "maximum messages per subject") {
		t.Errorf("the refusal: %v, want eventlog.ErrTooManyWakes from the broker's per-subject limit", err)
	}
	t.Logf("the flood was refused after %d wakes: %v", sent, err)
	// Ended, the task's held wakes are dropped rather than redelivered
	// through the subtests that follow.
	if _, err := a.e.eng.Cancel(a.ctx, id, "the flood is over"); err != nil {
		t.Fatal(err)
	}
	waitFold(t, foldRead(a.reader), id, time.Minute, "the end", terminal)
}
