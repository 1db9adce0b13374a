package jetstream_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// suspendOnHandle enqueues a fresh task on d, leases it and suspends it on
// a human_response for a fresh handle.
func suspendOnHandle(t *testing.T, d *jetstream.Dispatcher) (string, noeta.Wake) {
	t.Helper()
	task := noeta.NewTaskID()
	mustEnqueue(t, d, task, eventlog.EnqueueOptions{Queue: testQueue()})
	l := mustLease(t, d, eventlog.LeaseRequest{Worker: "w", Task: task})
	cond := noeta.HumanResponseWake("approval-" + noeta.NewID())
	if err := d.Release(t.Context(), l, eventlog.Release{Next: eventlog.DispatchSuspended, WakeOn: &cond, Reason: "waiting_approval"}); err != nil {
		t.Fatal(err)
	}
	return task, cond
}

// matchedWake waits until task's row holds a matched wake and returns it.
func matchedWake(t *testing.T, d *jetstream.Dispatcher, task string) noeta.Wake {
	t.Helper()
	var got *noeta.Wake
	waitFor(t, 20*time.Second, "the answer applied to "+task, func() error {
		st, err := d.Inspect(t.Context(), task)
		if err != nil {
			return err
		}
		if st.MatchedWake == nil {
			return fmt.Errorf("task %s is %s with nothing matched", task, st.Status)
		}
		got = st.MatchedWake
		return nil
	})
	return *got
}

// TestApprovalSubjectStampsApprover: the approver and how it was
// authenticated come from the subject an answer arrives on, never from its
// body. Before approval subjects existed, the body's approver was recorded
// as sent: any publisher of wakes could answer as "alice", and could claim
// to be authenticated by a token or to be the expiry timer.
func TestApprovalSubjectStampsApprover(t *testing.T) {
	d, prefix := openVouchingDispatcher(t, noeta.AuthNATS)
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, bodyApprover, bodyAuth string
	}{
		{"claims another approver", "mallory", ""},
		{"claims a token", "alice", noeta.AuthToken},
		{"claims the timer", noeta.ApproverTimeout, noeta.AuthTimer},
		{"claims local", "cli:root", noeta.AuthLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task, cond := suspendOnHandle(t, d)
			subj, err := jetstream.ApproveSubject(prefix, "alice", task)
			if err != nil {
				t.Fatal(err)
			}
			// The body dates itself before any deadline; the broker's
			// timestamp of the message is what counts.
			forged := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
			body := noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: cond.Handle, Decision: "approve",
				Approver: tc.bodyApprover, Auth: tc.bodyAuth, Text: "looks fine", ExpireAt: time.Now().Add(time.Hour).UTC(), ReceivedAt: forged}
			from := time.Now().UTC().Truncate(time.Millisecond)
			if _, err := js.Publish(t.Context(), subj, wakeJSON(t, body)); err != nil {
				t.Fatal(err)
			}
			to := time.Now().UTC()
			got := matchedWake(t, d, task)
			if got.ReceivedAt.Before(from) || got.ReceivedAt.After(to) {
				t.Errorf("applied answer: received_at %s, want the broker's timestamp of the message, in [%s, %s], not the body's %s",
					got.ReceivedAt.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), forged.Format(time.RFC3339))
			}
			if got.Approver != "alice" || got.Auth != noeta.AuthNATS {
				t.Errorf("applied answer: approver %q auth %q, want \"alice\" %q (the subject's)", got.Approver, got.Auth, noeta.AuthNATS)
			}
			if !got.ExpireAt.IsZero() || got.Decision != "approve" || got.Text != "looks fine" {
				t.Errorf("applied answer: %+v, want the decision and reason kept and no expire_at", got)
			}
		})
	}
	t.Run("ApprovalPublisher", func(t *testing.T) {
		task, cond := suspendOnHandle(t, d)
		p, err := jetstream.NewApprovalPublisher(connect(t, singleURL), prefix, "bob")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Answer(t.Context(), task, cond.Handle, "maybe", ""); !errors.Is(err, eventlog.ErrInvalidArgument) {
			t.Errorf("Answer with decision maybe: got %v, want ErrInvalidArgument", err)
		}
		if err := p.Answer(t.Context(), task, cond.Handle, noeta.ApprovalDeny, "too risky"); err != nil {
			t.Fatal(err)
		}
		got := matchedWake(t, d, task)
		want := noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: cond.Handle, Decision: "deny", Text: "too risky", Approver: "bob", Auth: noeta.AuthNATS, ReceivedAt: got.ReceivedAt}
		if !got.Equal(want) || got.ReceivedAt.IsZero() {
			t.Errorf("applied answer: got %+v, want %+v", got, want)
		}
	})
}

// openVouchingDispatcher opens a dispatcher of a prefix of its own that
// records answers on approval subjects as authenticated by auth.
func openVouchingDispatcher(t *testing.T, auth string) (*jetstream.Dispatcher, string) {
	t.Helper()
	cfg := testDispatcherConfig(1, uniquePrefix(t, singleURL))
	cfg.ApproveSubjectAuth = auth
	precreatePrefix(t, singleURL, cfg)
	d, err := jetstream.OpenDispatcher(t.Context(), connect(t, singleURL), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d, cfg.Prefix
}

// TestApprovalSubjectAuthIsTheDeployments: how an answer on an approval
// subject is recorded as authenticated is what the dispatcher is told the
// broker vouches for, and by default nothing. Before, every answer on an
// approval subject was recorded auth nats: on the embedded default, whose
// one local user may publish on every approver's subject, one process
// answered as "bob" and then as "carol", both "vouched for by the broker",
// and met a quorum that counts only broker- or HTTP-authenticated
// approvers.
func TestApprovalSubjectAuthIsTheDeployments(t *testing.T) {
	for _, tc := range []struct{ config, want string }{
		{"", noeta.AuthNone},
		{noeta.AuthNone, noeta.AuthNone},
		{noeta.AuthLocal, noeta.AuthLocal},
		{noeta.AuthNATS, noeta.AuthNATS},
	} {
		t.Run("configured "+tc.config, func(t *testing.T) {
			d, prefix := openVouchingDispatcher(t, tc.config)
			js, err := natsjs.New(connect(t, singleURL))
			if err != nil {
				t.Fatal(err)
			}
			task, cond := suspendOnHandle(t, d)
			subj, err := jetstream.ApproveSubject(prefix, "bob", task)
			if err != nil {
				t.Fatal(err)
			}
			body := noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: cond.Handle, Decision: "approve", Approver: "bob", Auth: noeta.AuthNATS}
			if _, err := js.Publish(t.Context(), subj, wakeJSON(t, body)); err != nil {
				t.Fatal(err)
			}
			if got := matchedWake(t, d, task); got.Approver != "bob" || got.Auth != tc.want {
				t.Errorf("applied answer: approver %q auth %q, want \"bob\" %q", got.Approver, got.Auth, tc.want)
			}
		})
	}
	for _, bad := range []string{noeta.AuthToken, noeta.AuthProxy, noeta.AuthTimer, "NATS"} {
		if err := (jetstream.DispatcherConfig{ApproveSubjectAuth: bad}).Validate(); err == nil || !strings.Contains(err.Error(), "ApproveSubjectAuth") {
			t.Errorf("ApproveSubjectAuth %q: Validate gave %v, want an error naming the field", bad, err)
		}
	}
}

// TestPlainWakeAnswerIsUnauthenticated: a human_response on the plain wake
// subject is applied with auth none whatever its body claims (the approver
// it asserts is kept, for the record), so the engine can refuse it where
// approvals must be authenticated.
func TestPlainWakeAnswerIsUnauthenticated(t *testing.T) {
	d := openDispatcher(t, singleURL, 1, dispatcherTestPrefix)
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	for _, claim := range []string{noeta.AuthNATS, noeta.AuthTimer, ""} {
		t.Run("auth "+claim, func(t *testing.T) {
			task, cond := suspendOnHandle(t, d)
			body := noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: cond.Handle, Decision: "approve", Approver: "alice", Auth: claim}
			if _, err := js.Publish(t.Context(), jetstream.WakeSubject(dispatcherTestPrefix, task), wakeJSON(t, body)); err != nil {
				t.Fatal(err)
			}
			got := matchedWake(t, d, task)
			if got.Auth != noeta.AuthNone || got.Approver != "alice" {
				t.Errorf("applied answer: approver %q auth %q, want \"alice\" %q", got.Approver, got.Auth, noeta.AuthNone)
			}
		})
	}
}

// TestApprovalSubjectRefusesOtherBodies: an approval subject carries
// approve or deny answers and nothing else; anything else is dropped and
// counted as invalid, and the task keeps waiting.
func TestApprovalSubjectRefusesOtherBodies(t *testing.T) {
	prefix := uniquePrefix(t, singleURL)
	d := openDispatcher(t, singleURL, 1, prefix)
	js, err := natsjs.New(connect(t, singleURL))
	if err != nil {
		t.Fatal(err)
	}
	task, cond := suspendOnHandle(t, d)
	subj, err := jetstream.ApproveSubject(prefix, "alice", task)
	if err != nil {
		t.Fatal(err)
	}
	bad := [][]byte{
		wakeJSON(t, noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: cond.Handle, Decision: "maybe"}),
		wakeJSON(t, noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: cond.Handle}),
		wakeJSON(t, noeta.ExternalWake("deploy")),
		[]byte(`not json`),
	}
	for _, b := range bad {
		if _, err := js.Publish(t.Context(), subj, b); err != nil {
			t.Fatal(err)
		}
	}
	// A valid answer after them: once it is applied, they were all seen
	// (one Dispatcher applies the ingress in order).
	if _, err := js.Publish(t.Context(), subj, wakeJSON(t, noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: cond.Handle, Decision: "deny"})); err != nil {
		t.Fatal(err)
	}
	if got := matchedWake(t, d, task); got.Decision != "deny" || got.Approver != "alice" {
		t.Errorf("applied: %+v, want alice's deny", got)
	}
	if n := d.Stats().InvalidWakes; n != uint64(len(bad)) {
		t.Errorf("InvalidWakes: got %d, want %d", n, len(bad))
	}
}

// TestApproveSubjectValidates: an approver that is not a subject token
// (a wildcard, a dot that would shift the task's place in the subject) is
// refused, so no approver's subject can name another's.
func TestApproveSubjectValidates(t *testing.T) {
	task := noeta.NewTaskID()
	for _, a := range []string{"", "*", ">", "alice.bob", "al ice", string(make([]byte, 65))} {
		if s, err := jetstream.ApproveSubject("noeta", a, task); !errors.Is(err, eventlog.ErrInvalidArgument) {
			t.Errorf("ApproveSubject(approver %q): got %q, %v; want ErrInvalidArgument", a, s, err)
		}
	}
	if _, err := jetstream.ApproveSubject("noeta", "alice", "not a task"); !errors.Is(err, eventlog.ErrInvalidArgument) {
		t.Errorf("ApproveSubject(bad task): %v, want ErrInvalidArgument", err)
	}
	s, err := jetstream.ApproveSubject("", "alice", task)
	if want := fmt.Sprintf("noeta.approve.alice.%d.%s", jetstream.Partition(task), task); err != nil || s != want {
		t.Errorf("ApproveSubject: got %q, %v; want %q", s, err, want)
	}
}
