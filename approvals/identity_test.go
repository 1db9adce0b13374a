package approvals_test

import (
	"errors"
	"testing"

	"github.com/noeta-go/noeta/approvals"
)

// TestApproverHostileNames: one normalisation decides every name. Before,
// names were compared as given, so CLI:alice passed self_approval: deny for
// the submitter cli:alice, the proxy header values CLI:root and Timeout
// were taken though the docs refuse such names, and cli:cli:alice or alice
// with a zero-width space counted as other people toward a quorum.
func TestApproverHostileNames(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string // want "" : refused
	}{
		{"plain", "alice", "alice"},
		{"door prefix kept", "cli:alice", "cli:alice"},
		{"door prefix upper case", "CLI:alice", "cli:alice"},
		{"door prefix mixed case", "Cli:alice", "cli:alice"},
		{"case of the name kept", "Alice", "Alice"},
		{"fullwidth letters", "ａｌｉｃｅ", "alice"},
		{"fullwidth colon in the prefix", "cli：alice", "cli:alice"},
		{"ligature", "ﬁona", "fiona"},
		{"mathematical letters", "𝐚𝐥𝐢𝐜𝐞", "alice"},
		{"doubled prefix", "cli:cli:alice", ""},
		{"doubled prefix, second upper", "cli:CLI:alice", ""},
		{"prefix alone", "cli:", ""},
		{"zero-width space", "ali\u200bce", ""},
		{"zero-width joiner", "alice\u200d", ""},
		{"word joiner", "\u2060alice", ""},
		{"byte order mark", "\ufeffalice", ""},
		{"right-to-left override", "alice\u202e", ""},
		{"soft hyphen", "ali\u00adce", ""},
		{"variation selector", "alice\ufe0f", ""},
		{"hangul filler", "alice\u3164", ""},
		{"combining grapheme joiner", "alice\u034f", ""},
		{"newline", "alice\nbob", ""},
		{"escape", "\x1b[2Kalice", ""},
		{"nul", "alice\x00", ""},
		{"space", "alice smith", ""},
		{"trailing space", "alice ", ""},
		{"no-break space", "alice\u00a0", ""},
		{"ideographic space", "alice\u3000", ""},
		{"invalid UTF-8", "alice\xff", ""},
		{"private use", "alice\ue000", ""},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := approvals.Approver(tc.in)
			switch {
			case tc.want == "" && err == nil:
				t.Fatalf("Approver(%q) = %q; want refused", tc.in, got)
			case tc.want == "" && !errors.Is(err, approvals.ErrBadApprover):
				t.Fatalf("Approver(%q): error %v; want ErrBadApprover", tc.in, err)
			case tc.want != "" && (err != nil || got != tc.want):
				t.Fatalf("Approver(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

// TestSamePersonHostileNames: every spelling of one person through any
// door is that person; a name Approver refuses is taken for anyone (so a
// self-approval or a second vote hidden in it is refused).
func TestSamePersonHostileNames(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"cli:alice", "alice", true},
		{"cli:alice", "CLI:alice", true},
		{"cli:alice", "Alice", true},
		{"alice", "ａｌｉｃｅ", true},
		{"alice", "cli:ＡＬＩＣＥ", true},
		{"alice", "ali\u200bce", true},
		{"alice", "cli:cli:alice", true},
		{"alice", "bob", false},
		{"cli:alice", "cli:bob", false},
		{"alice", "", false},
	} {
		if got := approvals.SamePerson(tc.a, tc.b); got != tc.same {
			t.Errorf("SamePerson(%q, %q) = %v; want %v", tc.a, tc.b, got, tc.same)
		}
		if got := approvals.SamePerson(tc.b, tc.a); got != tc.same {
			t.Errorf("SamePerson(%q, %q) = %v; want %v", tc.b, tc.a, got, tc.same)
		}
	}
	for _, n := range []string{"timeout", "Timeout", "TIMEOUT", "ｔｉｍｅｏｕｔ", "cli:timeout"} {
		if !approvals.Reserved(n) {
			t.Errorf("Reserved(%q) = false; want true (it reads as the expiry's approver)", n)
		}
	}
	if approvals.Reserved("timeouts") {
		t.Error(`Reserved("timeouts") = true; want false`)
	}
}
