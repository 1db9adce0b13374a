package eventlog_test

import (
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// TestAnswerIgnoresExpiry: the expiry a condition carries takes no part in
// whether an answer matches it; an answer that carried one is matched all
// the same (and the ingress strips it).
func TestAnswerIgnoresExpiry(t *testing.T) {
	at := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	cond := noeta.HumanResponseWake("approval-1")
	cond.ExpireAt = at
	ans := noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "approval-1", Decision: "approve", Approver: "alice", Auth: noeta.AuthNATS}
	withExpiry := ans
	withExpiry.ExpireAt = at.Add(time.Hour)
	for _, ev := range []noeta.Wake{ans, withExpiry} {
		if err := eventlog.CheckAnswer("t1", eventlog.DispatchSuspended, &cond, nil, ev); err != nil {
			t.Errorf("CheckAnswer(%+v) on a condition with an expiry: %v, want nil", ev, err)
		}
		if !noeta.Matches(&cond, &ev) {
			t.Errorf("Matches(%+v): false, want true", ev)
		}
	}
	other := ans
	other.Handle = "approval-2"
	if err := eventlog.CheckAnswer("t1", eventlog.DispatchSuspended, &cond, nil, other); err == nil {
		t.Errorf("CheckAnswer with another handle: nil, want an error")
	}
}

func TestDeadlineAndTimerAnswer(t *testing.T) {
	at := time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC)
	expiring := noeta.HumanResponseWake("h")
	expiring.ExpireAt = at
	timer := noeta.TimerWake(at)
	for _, tc := range []struct {
		name  string
		w     *noeta.Wake
		want  time.Time
		timed bool
	}{
		{"timer", &timer, at, true},
		{"expiring approval", &expiring, at, true},
		{"approval without expiry", new(noeta.HumanResponseWake("h")), time.Time{}, false},
		{"external event", new(noeta.ExternalWake("e")), time.Time{}, false},
		{"nil", nil, time.Time{}, false},
	} {
		got, timed := eventlog.Deadline(tc.w)
		if timed != tc.timed || !got.Equal(tc.want) {
			t.Errorf("Deadline(%s): got %v %v, want %v %v", tc.name, got, timed, tc.want, tc.timed)
		}
	}
	if got := eventlog.TimerAnswer(timer); !got.Equal(timer) {
		t.Errorf("TimerAnswer(timer): got %+v, want the condition", got)
	}
	want := noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "h", Decision: "deny", Approver: noeta.ApproverTimeout,
		Auth: noeta.AuthTimer, Text: "no answer before 2026-12-01T18:00:00Z"}
	if got := eventlog.TimerAnswer(expiring); !got.Equal(want) {
		t.Errorf("TimerAnswer(expiring approval): got %+v, want %+v", got, want)
	}
	if err := eventlog.TimerAnswer(expiring).Validate(); err != nil {
		t.Errorf("the expiry answer does not validate: %v", err)
	}
}
