package eventlog_test

import (
	"errors"
	"testing"

	"github.com/noeta-go/noeta/eventlog"
)

func TestCheckDense(t *testing.T) {
	seqs := func(ss ...uint64) []eventlog.Envelope {
		out := make([]eventlog.Envelope, len(ss))
		for i, s := range ss {
			out[i] = eventlog.Envelope{Task: "T", Seq: s}
		}
		return out
	}
	tests := []struct {
		name        string
		after, last uint64
		envs        []eventlog.Envelope
		gap         *eventlog.GapError // nil: no gap
		corrupt     bool
		msg         string
	}{
		{name: "dense", envs: seqs(1, 2, 3), last: 3},
		{name: "dense after", after: 2, envs: seqs(3, 4), last: 4},
		{name: "empty at the end", after: 4, last: 4},
		{name: "tail unknown", envs: seqs(1, 2)},
		{name: "hole", envs: seqs(1, 2, 4), last: 4, gap: &eventlog.GapError{Task: "T", After: 2, First: 3, Last: 3, Next: 4}, msg: "missing seq 3 (seq 2 is followed by seq 4)"},
		{name: "genesis lost", envs: seqs(2, 3), last: 3, gap: &eventlog.GapError{Task: "T", First: 1, Last: 1, Next: 2}},
		{name: "hole after", after: 5, envs: seqs(9), last: 9, gap: &eventlog.GapError{Task: "T", After: 5, First: 6, Last: 8, Next: 9}, msg: "missing seq 6-8 (seq 5 is followed by seq 9)"},
		{name: "short of the tail", envs: seqs(1, 2), last: 4, gap: &eventlog.GapError{Task: "T", After: 2, First: 3, Last: 4}},
		{name: "nothing read", after: 1, last: 3, gap: &eventlog.GapError{Task: "T", After: 1, First: 2, Last: 3}},
		{name: "repeat", envs: seqs(1, 2, 2), last: 2, corrupt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := eventlog.CheckDense("T", tt.after, tt.envs, tt.last)
			var gap *eventlog.GapError
			switch {
			case tt.corrupt:
				if !errors.Is(err, eventlog.ErrCorrupt) {
					t.Fatalf("got %v, want ErrCorrupt", err)
				}
			case tt.gap == nil:
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
			case !errors.As(err, &gap) || !errors.Is(err, eventlog.ErrGap):
				t.Fatalf("got %v, want %+v", err, *tt.gap)
			case *gap != *tt.gap:
				t.Errorf("got %+v, want %+v", *gap, *tt.gap)
			case tt.msg != "" && err.Error() != "eventlog: gap in the log of task T: "+tt.msg:
				t.Errorf("message %q, want it to end %q", err, tt.msg)
			}
		})
	}
}
