package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// shortExpiry: boss's echo calls need approval and expire after 2 s
// unanswered (a broker timer's granularity is the second).
const shortExpiry = pathsConfig + `
approvals:
  rules:
    - name: echo-expires
      when: 'tool == "echo"'
      timeout: 2s
`

// expiredOnce checks that the task's log holds exactly one resolution of
// handle, a denial by the timer, and one TaskWoken for it.
func expiredOnce(t *testing.T, envs []eventlog.Envelope, handle string) {
	t.Helper()
	var resolved, woken int
	for _, e := range envs {
		p, _, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *noeta.ApprovalResolved:
			resolved++
			if p.Handle != handle || p.Decision != noeta.ApprovalDeny || p.Approver != noeta.ApproverTimeout || p.Auth != noeta.AuthTimer || !strings.HasPrefix(p.Reason, "no answer before ") {
				t.Errorf("resolution %+v; want %s denied by timeout (timer), no answer before …", p, handle)
			}
		case *noeta.TaskWoken:
			if p.WakeEvent.Handle == handle {
				woken++
			}
		}
	}
	if resolved != 1 || woken != 1 {
		t.Fatalf("%d resolutions and %d wakes of %s; want one of each", resolved, woken, handle)
	}
}

// TestExpiryFires: an approval nobody answers expires at its deadline by
// the broker's timer: denied by timeout once, and the policy decides again
// (the script's next turn finishes).
func TestExpiryFires(t *testing.T) {
	for _, mk := range backends(t) {
		b := mk(t)
		t.Run(b.name, func(t *testing.T) {
			h := newHarness(t, b, shortExpiry, withGuards(gate("tool_call")), withApprovals(t, shortExpiry))
			h.start(1)
			id := h.submit(nowApproval)
			st := waitOpen(t, h, id, nil)
			handle := st.WakeOn.Handle
			if st.WakeOn.ExpireAt.IsZero() {
				t.Fatalf("suspended without an expiry: %+v", st.WakeOn)
			}
			st = h.waitStatus(id, noeta.StatusTerminal)
			if string(st.Answer) != `"done"` || st.Governance.ToolCalls != 0 {
				t.Fatalf("answer %s, %d calls; want the call never run and the task done", st.Answer, st.Governance.ToolCalls)
			}
			expiredOnce(t, h.log(id), handle)
		})
	}
}

// jsOpen opens a dispatcher and log on prefix, as a process starting does;
// close closes them and the connection, as the process stopping.
func jsOpen(t *testing.T, prefix string, ttl time.Duration) (b backend, close func()) {
	t.Helper()
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	disp, err := jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{Prefix: prefix, LeaseTTL: ttl, ReclaimMax: 1000, MaxFailAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	log, err := jetstream.Open(t.Context(), nc, jetstream.Config{Prefix: prefix, Registry: disp})
	if err != nil {
		t.Fatal(err)
	}
	closeAll := func() {
		_ = log.Close()
		_ = disp.Close()
		nc.Close()
	}
	t.Cleanup(closeAll)
	return backend{name: "jetstream", log: log, disp: disp, content: log, ttl: ttl}, closeAll
}

// TestExpiryAcrossRestart: the engine process stops while a request waits
// (dispatcher, log and connection closed), its deadline passes while none
// runs, and a new process on the same streams resolves it denied by
// timeout exactly once.
func TestExpiryAcrossRestart(t *testing.T) {
	prefix := fmt.Sprintf("exr%d", prefixes.Add(1))
	b, stop := jsOpen(t, prefix, 2*time.Second)
	h := newHarness(t, b, shortExpiry, withGuards(gate("tool_call")), withApprovals(t, shortExpiry))
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
	stop()

	for time.Now().Before(deadline.Add(time.Second)) {
		time.Sleep(100 * time.Millisecond)
	}
	b2, _ := jsOpen(t, prefix, 2*time.Second)
	h2 := newHarness(t, b2, shortExpiry, withGuards(gate("tool_call")), withApprovals(t, shortExpiry))
	h2.start(1)
	st = h2.waitStatus(id, noeta.StatusTerminal)
	if string(st.Answer) != `"done"` || st.Governance.ToolCalls != 0 {
		t.Fatalf("answer %s, %d calls; want the call never run and the task done", st.Answer, st.Governance.ToolCalls)
	}
	h2.waitReleased(id, eventlog.DispatchTerminal)
	expiredOnce(t, h2.log(id), handle)
	if ds, err := b2.disp.Inspect(context.Background(), id); err != nil || ds.MatchedWake != nil || ds.PendingWakes != 0 {
		t.Fatalf("dispatcher after the end: %+v, %v; want nothing left", ds, err)
	}
}
