package engine_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

// heldTimers is a memlog clock whose time is set by the test and whose
// timers never fire: a request's expiry timer that has not fired yet when
// an answer arrives after the deadline (the broker rounds a deadline up to
// the whole second; no engine ran at the deadline).
type heldTimers struct {
	mu  sync.Mutex
	now time.Time
}

func (c *heldTimers) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *heldTimers) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *heldTimers) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }

// lateBackend is a memlog store on clk, whose timers never fire.
func lateBackend(t testing.TB, clk *heldTimers) backend {
	t.Helper()
	s, err := memlog.New(memlog.Options{LeaseTTL: time.Hour, ReclaimMax: 1000, MaxFailAttempts: 1000, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return backend{name: "memlog", log: s, disp: s, content: s, ttl: time.Hour}
}

// lateRefused checks that the log of a task whose request handle was
// answered by approver after its deadline holds that answer's refusal,
// naming the deadline, and the request's one resolution, denied by
// timeout; and that the call never ran.
func lateRefused(t *testing.T, h *harness, id, handle, approver string) {
	t.Helper()
	st := h.waitStatus(id, noeta.StatusTerminal)
	if string(st.Answer) != `"done"` || st.Governance.ToolCalls != 0 {
		t.Fatalf("answer %s, %d calls; want the call never run and the task done\n%s", st.Answer, st.Governance.ToolCalls, h.dump(id))
	}
	expiredOnce(t, h.log(id), handle)
	var refused int
	for _, e := range h.log(id) {
		if p, _, err := e.Decode(); err == nil {
			if r, ok := p.(*noeta.ApprovalRefused); ok {
				refused++
				if r.Approver != approver || !strings.Contains(r.Reason, "after the request expired") {
					t.Errorf("refusal %+v; want %s's answer refused as received after the request expired", r, approver)
				}
			}
		}
	}
	if refused != 1 {
		t.Fatalf("%d refusals; want the late answer's one\n%s", refused, h.dump(id))
	}
}

// TestAnswerAfterExpiryRefused: an approval received after its request's
// deadline, and reaching the task before the expiry's timer, is refused
// and the request resolves denied by timeout; the call never runs.
//
// Before: judge never compared an answer's time with expires_at, so an
// approval received after the deadline was taken whenever it reached the
// task before the timer (no engine running at the deadline, or within the
// second the broker rounds a timer up by), and the call ran.
func TestAnswerAfterExpiryRefused(t *testing.T) {
	clk := &heldTimers{now: time.Now().UTC().Truncate(time.Millisecond)}
	b := lateBackend(t, clk)
	h := newHarness(t, b, shortExpiry, withGuards(gate("tool_call")), withApprovals(t, shortExpiry),
		func(c *engine.Config) { c.Now = clk.Now })
	h.start(1)
	id := h.submit(nowApproval)
	st := waitOpen(t, h, id, nil)
	handle, deadline := st.WakeOn.Handle, st.WakeOn.ExpireAt

	// Received exactly at the deadline: already too late.
	clk.set(deadline)
	answer(t, h, id, handle, "alice", noeta.AuthLocal, noeta.ApprovalApprove, "at the deadline")
	lateRefused(t, h, id, handle, "alice")
}

// TestAnswerBeforeExpiryJudgedAfter: an approval received before the
// deadline counts even when the task judges it long after (no engine ran
// until then): the time it was received decides, not the judge's clock.
func TestAnswerBeforeExpiryJudgedAfter(t *testing.T) {
	clk := &heldTimers{now: time.Now().UTC().Truncate(time.Millisecond)}
	b := lateBackend(t, clk)
	h := newHarness(t, b, shortExpiry, withGuards(gate("tool_call")), withApprovals(t, shortExpiry),
		func(c *engine.Config) { c.Now = clk.Now })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.eng.NewPool("before", 1).Run(ctx)
	}()
	id := h.submit(nowApproval)
	st := waitOpen(t, h, id, nil)
	handle, deadline := st.WakeOn.Handle, st.WakeOn.ExpireAt
	cancel()
	<-done

	clk.set(deadline.Add(-time.Millisecond))
	answer(t, h, id, handle, "alice", noeta.AuthLocal, noeta.ApprovalApprove, "just in time")
	clk.set(deadline.Add(time.Hour))
	h.start(1)
	st = h.waitStatus(id, noeta.StatusTerminal)
	if string(st.Answer) != `"done"` || st.Governance.ToolCalls != 1 {
		t.Fatalf("answer %s, %d calls; want the approved call run\n%s", st.Answer, st.Governance.ToolCalls, h.dump(id))
	}
	if a := st.Governance.Approvals; len(a) != 1 || a[0].Approver != "alice" || a[0].Decision != noeta.ApprovalApprove {
		t.Fatalf("approvals %+v; want alice's approval", a)
	}
}

// TestAnswerAfterExpiryOnSubject: on JetStream the time an answer was
// received is the broker's timestamp of the message on the approval
// subject. The request's deadline is set 1 ms past a whole second, so the
// broker's timer, rounded up to the second, fires 999 ms after it; an
// approval published once the deadline has passed is refused and the
// request resolves denied by timeout, whichever of the two reaches the
// task first.
//
// Before: an approval in that window was applied before the timer, taken,
// and the call ran (seen 2 of 3 times 0.2-0.5 s late with serve running).
func TestAnswerAfterExpiryOnSubject(t *testing.T) {
	b := jsBackend(t, 2*time.Second)
	asked := time.Now().Truncate(time.Second).Add(time.Second + time.Millisecond)
	h := newHarness(t, b, shortExpiry, withGuards(gate("tool_call")), withApprovals(t, shortExpiry),
		func(c *engine.Config) { c.Now = func() time.Time { return asked } })
	h.start(1)
	id := h.submit(nowApproval)
	st := waitOpen(t, h, id, nil)
	handle, deadline := st.WakeOn.Handle, st.WakeOn.ExpireAt
	for time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	p, err := jetstream.NewApprovalPublisher(b.nc, b.prefix, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Answer(context.Background(), id, handle, noeta.ApprovalApprove, "late"); err != nil {
		t.Fatal(err)
	}
	st = h.waitStatus(id, noeta.StatusTerminal)
	if string(st.Answer) != `"done"` || st.Governance.ToolCalls != 0 {
		t.Fatalf("answer %s, %d calls; want the call never run and the task done\n%s", st.Answer, st.Governance.ToolCalls, h.dump(id))
	}
	h.waitReleased(id, eventlog.DispatchTerminal)
	expiredOnce(t, h.log(id), handle)
}
