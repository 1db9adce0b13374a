package guards

import (
	"strconv"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

// history builds a governance slice whose recent calls are the given keys,
// oldest first; "=" stands for the proposed call (echo {"a":1}).
func history(keys ...string) noeta.GovernanceState {
	var g noeta.GovernanceState
	for _, k := range keys {
		switch k {
		case "=":
			g.NoteToolCall(noeta.ToolCallKey{Tool: "echo", Args: `{"a":1}`})
		case "other-args":
			g.NoteToolCall(noeta.ToolCallKey{Tool: "echo", Args: `{"a":2}`})
		case "other-tool":
			g.NoteToolCall(noeta.ToolCallKey{Tool: "shell", Args: `{"a":1}`})
		}
	}
	return g
}

func repeat(k string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = k
	}
	return s
}

func TestRepetition(t *testing.T) {
	reason := func(n, threshold int) string {
		return `tool "echo" called with identical arguments ` + strconv.Itoa(n) + ` times in a row (repetition threshold ` + strconv.Itoa(threshold) + `); suspected loop`
	}
	tests := []struct {
		name    string
		policy  RepetitionPolicy
		hist    []string
		a       noeta.ProposedAction
		verdict noeta.Verdict
		reason  string
	}{
		{"run below threshold", RepetitionPolicy{Threshold: 3}, []string{"="}, toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"run reaching threshold asks for approval", RepetitionPolicy{Threshold: 3}, []string{"=", "="}, toolCall("echo", `{"a":1}`), noeta.VerdictRequireApproval, reason(3, 3)},
		{"run over threshold", RepetitionPolicy{Threshold: 3}, []string{"=", "=", "=", "="}, toolCall("echo", `{"a":1}`), noeta.VerdictRequireApproval, reason(5, 3)},
		{"action deny", RepetitionPolicy{Threshold: 3, Action: noeta.VerdictDeny}, []string{"=", "="}, toolCall("echo", `{"a":1}`), noeta.VerdictDeny, reason(3, 3)},
		{"action require_approval explicit", RepetitionPolicy{Threshold: 2, Action: noeta.VerdictRequireApproval}, []string{"="}, toolCall("echo", `{"a":1}`), noeta.VerdictRequireApproval, reason(2, 2)},
		{"threshold 1 trips on the first call", RepetitionPolicy{Threshold: 1}, nil, toolCall("echo", `{"a":1}`), noeta.VerdictRequireApproval, reason(1, 1)},
		{"threshold 0 is off", RepetitionPolicy{Threshold: 0}, repeat("=", 32), toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"negative threshold is off", RepetitionPolicy{Threshold: -1}, repeat("=", 32), toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"a different call breaks the run", RepetitionPolicy{Threshold: 3}, []string{"=", "=", "other-args", "="}, toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"only the newest run counts", RepetitionPolicy{Threshold: 3}, []string{"=", "=", "=", "other-tool"}, toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"same args, other tool", RepetitionPolicy{Threshold: 2}, []string{"other-tool"}, toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"same tool, other args", RepetitionPolicy{Threshold: 2}, []string{"other-args"}, toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"arguments compared canonically", RepetitionPolicy{Threshold: 2}, []string{"="}, toolCall("echo", ` { "a" : 1.0 } `), noeta.VerdictRequireApproval, reason(2, 2)},
		{"no arguments are {}", RepetitionPolicy{Threshold: 2}, nil, toolCall("noargs", ``), noeta.VerdictAllow, ""},
		// The window is honoured: at most Window prior calls are read.
		{"window caps the run counted", RepetitionPolicy{Threshold: 2, Window: 3}, repeat("=", 10), toolCall("echo", `{"a":1}`), noeta.VerdictRequireApproval, reason(4, 2)},
		{"window just long enough", RepetitionPolicy{Threshold: 4, Window: 3}, repeat("=", 10), toolCall("echo", `{"a":1}`), noeta.VerdictRequireApproval, reason(4, 4)},
		{"window just long enough, run one short", RepetitionPolicy{Threshold: 4, Window: 3}, append([]string{"other-args"}, repeat("=", 2)...), toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"calls outside the window are not read", RepetitionPolicy{Threshold: 3, Window: 2}, []string{"=", "=", "=", "other-args", "other-args"}, toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		{"default window is 8", RepetitionPolicy{Threshold: 9}, repeat("=", 20), toolCall("echo", `{"a":1}`), noeta.VerdictRequireApproval, reason(9, 9)},
		{"full window of 32 trips at 33", RepetitionPolicy{Threshold: 33, Window: 32}, repeat("=", 32), toolCall("echo", `{"a":1}`), noeta.VerdictRequireApproval, reason(33, 33)},
		{"full window of 32, one short", RepetitionPolicy{Threshold: 33, Window: 32}, append([]string{"other-args"}, repeat("=", 31)...), toolCall("echo", `{"a":1}`), noeta.VerdictAllow, ""},
		// Other action points.
		{"spawn allowed", RepetitionPolicy{Threshold: 1, Action: noeta.VerdictDeny}, nil, spawn("a"), noeta.VerdictAllow, ""},
		{"finish allowed", RepetitionPolicy{Threshold: 1, Action: noeta.VerdictDeny}, nil, finish(), noeta.VerdictAllow, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRepetition(tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			wantVerdict(t, checkGuard(t, r, tt.a, gctx(history(tt.hist...), 0)), tt.verdict, tt.reason)
		})
	}
}

func TestRepetitionInvalidArgs(t *testing.T) {
	r, _ := NewRepetition(RepetitionPolicy{Threshold: 3})
	_, err := r.Check(t.Context(), toolCall("echo", `{"a":`), gctx(noeta.GovernanceState{}, 0))
	if err == nil || !strings.Contains(err.Error(), "tool arguments are not valid JSON") {
		t.Errorf("got %v, want an invalid-JSON error", err)
	}
	s := mustStack(t, []Guard{r})
	d := s.Check(t.Context(), toolCall("echo", `{"a":1,"a":2}`), gctx(noeta.GovernanceState{}, 0))
	if d.Verdict != noeta.VerdictDeny || d.Guard != NameRepetition || !strings.HasPrefix(d.Reason, `guard "repetition" failed: tool arguments are not valid JSON`) {
		t.Errorf("duplicate keys: got %v %q by %s", d.Verdict, d.Reason, d.Guard)
	}
}

func TestKeyOf(t *testing.T) {
	for _, tt := range []struct{ args, want string }{
		{``, `{}`},
		{`{"b":1, "a":"é"}`, `{"a":"\u00e9","b":1}`},
		{`{"a":1.0}`, `{"a":1}`},
	} {
		k, err := KeyOf(noeta.ToolCall{Tool: "t", Args: []byte(tt.args)})
		if err != nil || k.Tool != "t" || k.Args != tt.want {
			t.Errorf("KeyOf(%q) = %+v, %v; want args %q", tt.args, k, err, tt.want)
		}
	}
	if _, err := KeyOf(noeta.ToolCall{Tool: "t", Args: []byte(`nope`)}); err == nil {
		t.Errorf("KeyOf accepted invalid JSON")
	}
}

func TestRepetitionValidate(t *testing.T) {
	tests := []struct {
		name   string
		policy RepetitionPolicy
		want   string
	}{
		{"allow is not an action", RepetitionPolicy{Threshold: 3, Action: noeta.VerdictAllow}, "action: must be deny or require_approval, not allow"},
		{"negative window", RepetitionPolicy{Threshold: 3, Window: -1}, "window: must be >= 0"},
		{"window over 32", RepetitionPolicy{Threshold: 3, Window: 33}, "window: must be <= 32"},
		{"threshold over 33", RepetitionPolicy{Threshold: 34, Window: 32}, "threshold: must be <= 33"},
		{"threshold beyond the window", RepetitionPolicy{Threshold: 6, Window: 4}, "threshold: 6 can never be reached looking back over 4 calls; set window to at least 5"},
		{"threshold beyond the default window", RepetitionPolicy{Threshold: 10}, "threshold: 10 can never be reached looking back over 8 calls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewRepetition(tt.policy)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	for _, p := range []RepetitionPolicy{{Threshold: 9}, {Threshold: 33, Window: 32}, {Threshold: 2, Window: 1}, {}} {
		if _, err := NewRepetition(p); err != nil {
			t.Errorf("NewRepetition(%+v): %v", p, err)
		}
	}
}

// TestRepetitionSpilledArgs: calls whose arguments are over the inline limit
// are keyed by their hash (as the fold records them), and still recognised.
func TestRepetitionSpilledArgs(t *testing.T) {
	big := noeta.ToolCall{Tool: "echo", Args: []byte(`{"text":"` + strings.Repeat("y", noeta.ArgsInlineLimit) + `"}`)}
	k, err := KeyOf(big)
	if err != nil || !strings.HasPrefix(k.Args, "sha256:") {
		t.Fatalf("KeyOf of big args: %+v %v", k, err)
	}
	rep, err := NewRepetition(RepetitionPolicy{Threshold: 3})
	if err != nil {
		t.Fatal(err)
	}
	c := NewContext(ContextParams{Governance: noeta.GovernanceState{RecentToolCalls: []noeta.ToolCallKey{k, k}}})
	r, err := rep.Check(t.Context(), noeta.ProposedToolCall{Call: big}, c)
	if err != nil || r.Verdict != noeta.VerdictRequireApproval {
		t.Errorf("third big call: %+v %v", r, err)
	}
}
