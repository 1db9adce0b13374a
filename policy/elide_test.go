package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

// transcript is a goal and n turns of one call each, whose outputs are out
// (a rune that is two bytes, so a byte count would be wrong); the last turn
// is a finish.
func transcript(n int, out string) *noeta.Transcript {
	t := &noeta.Transcript{Messages: []noeta.Message{{Role: noeta.RoleUser, Text: "goal: " + out}}}
	for i := range n {
		id := "call-" + string(rune('a'+i))
		t.Messages = append(t.Messages,
			noeta.Message{Role: noeta.RoleAssistant, ToolCalls: []noeta.ToolCall{{CallID: id, Tool: "echo", Args: json.RawMessage(`{}`)}}},
			noeta.Message{Role: noeta.RoleTool, ToolCallID: id, ToolName: "echo", Text: out})
	}
	return t
}

func texts(t *noeta.Transcript) []string {
	var out []string
	for _, m := range t.Messages {
		out = append(out, m.Text)
	}
	return out
}

func TestElide(t *testing.T) {
	big := strings.Repeat("é", 100)
	note := "[output elided: 100 chars]"
	size := func(t *noeta.Transcript) int {
		n := 0
		for _, m := range t.Messages {
			n += messageChars(m)
		}
		return n
	}
	full := transcript(3, big) // 106 + 3*(2+100) = 412 chars
	cases := []struct {
		name       string
		in         *noeta.Transcript
		max        int
		want       []string
		wantElided int
	}{
		{"fits", full, 412, texts(full), 0},
		{"no budget", full, 0, texts(full), 0},
		{"one over: the oldest output goes", full, 411, []string{"goal: " + big, "", note, "", big, "", big}, 1},
		{"two go", full, 300, []string{"goal: " + big, "", note, "", note, "", big}, 2},
		// The goal and the last turn stay, over budget or not.
		{"never the goal nor the last turn", full, 10, []string{"goal: " + big, "", note, "", note, "", big}, 2},
		{"a goal alone", transcript(0, big), 1, []string{"goal: " + big}, 0},
		// An output shorter than its note is left: eliding it would grow
		// the transcript.
		{"short outputs stay", transcript(3, "ok"), 1, []string{"goal: ok", "", "ok", "", "ok", "", "ok"}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before, _ := json.Marshal(c.in)
			got := Elide(c.in, c.max)
			if after, _ := json.Marshal(c.in); string(after) != string(before) {
				t.Fatalf("Elide modified its input:\n%s\n%s", before, after)
			}
			if !reflect.DeepEqual(texts(got), c.want) || got.Elided != c.wantElided {
				t.Fatalf("got %q elided %d; want %q elided %d", texts(got), got.Elided, c.want, c.wantElided)
			}
			if c.wantElided > 0 && c.max >= 300 && size(got) > c.max {
				t.Errorf("%d chars, over the budget of %d", size(got), c.max)
			}
			if again := Elide(c.in, c.max); !reflect.DeepEqual(again, got) {
				t.Errorf("not deterministic: %+v then %+v", got, again)
			}
		})
	}
}

// TestElideKeepsErrors: a denial is how a model learns what it may not do,
// so it is never elided, however long and old.
func TestElideKeepsErrors(t *testing.T) {
	tr := transcript(2, strings.Repeat("x", 50))
	tr.Messages[2].IsError = true
	tr.Messages[2].Text = "denied by rules: " + strings.Repeat("r", 200)
	got := Elide(tr, 10)
	if got.Messages[2].Text != tr.Messages[2].Text || got.Elided != 0 {
		t.Fatalf("the denial was elided: %q (elided %d)", got.Messages[2].Text, got.Elided)
	}
}

// TestElideCountsEarlierElisions: a transcript already elided keeps its
// count, and adds to it.
func TestElideCountsEarlierElisions(t *testing.T) {
	tr := transcript(2, strings.Repeat("x", 50))
	tr.Elided = 4
	if got := Elide(tr, 60); got.Elided != 5 {
		t.Fatalf("elided %d, want 5", got.Elided)
	}
	if Elide(nil, 10) != nil {
		t.Fatal("Elide(nil) is not nil")
	}
}
