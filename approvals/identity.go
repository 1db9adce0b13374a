package approvals

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// ErrBadApprover is wrapped by [Approver] for a name that cannot be an
// approver's.
var ErrBadApprover = errors.New("approvals: not an approver name")

// CLIPrefix is the door prefix of the local user of the embedded default
// (cli:$USER).
const CLIPrefix = "cli:"

// LocalApprover names the local user of the embedded default, who answers
// from the command line: cli:$USER, else cli: and the name of the
// process's user (a shell without USER, a container), or cli:uid-N by the
// process's user id when no name is known. Without the fallbacks every
// local user of such an environment was the same "cli", and a submitter
// named so could not be told from anyone else.
func LocalApprover() string {
	if u := os.Getenv("USER"); u != "" {
		return CLIPrefix + u
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return CLIPrefix + u.Username
	}
	return CLIPrefix + "uid-" + strconv.Itoa(os.Getuid())
}

// reserved are the names no person answers as, compared as [SamePerson]
// does: the expiry's own approver.
var reserved = []string{"timeout"}

// MaxApproverLen bounds an approver name, in bytes after normalisation.
const MaxApproverLen = 256

// Approver returns the one form in which an approver's name is compared
// and recorded, or an error wrapping ErrBadApprover saying what is wrong
// with it. Every door an answer comes through (the CLI's --as, an HTTP
// proxy's header or token name, a NATS approval subject) and every
// comparison of identities (self-approval, the quorum's distinct
// approvers, the rules' approver) goes through it, so one person cannot
// pass for another, or for two:
//
//   - the text is Unicode NFKC (a fullwidth ａｌｉｃｅ is alice, a
//     ligature ﬁ is fi);
//   - a name holding a control character, an invisible one (format
//     characters such as the zero-width space or a direction override,
//     variation selectors, other default-ignorable code points), white
//     space, or invalid UTF-8 is refused outright, never cleaned: such a
//     name is a forgery or a mistake;
//   - the door prefix is lower case (CLI:alice is cli:alice), and only one
//     (cli:cli:alice is refused).
//
// Case is otherwise kept for the record; [SamePerson] compares without it.
func Approver(name string) (string, error) {
	bad := func(format string, a ...any) (string, error) {
		return "", fmt.Errorf("%w: %q: %s", ErrBadApprover, name, fmt.Sprintf(format, a...))
	}
	if name == "" {
		return bad("empty: an answer must say who gave it")
	}
	if !utf8.ValidString(name) {
		return bad("not valid UTF-8")
	}
	if r, ok := hidden(name); ok {
		return bad("holds %U, a control, invisible or space character: a name that does not show what it is is refused", r)
	}
	n := norm.NFKC.String(name)
	if r, ok := hidden(n); ok {
		// NFKC maps some characters to spaces (U+00A0, U+3000).
		return bad("holds %U once normalised (NFKC), a control, invisible or space character", r)
	}
	if len(n) > MaxApproverLen {
		return bad("longer than %d bytes", MaxApproverLen)
	}
	if hasCLIPrefix(n) {
		n = CLIPrefix + n[len(CLIPrefix):]
		rest := n[len(CLIPrefix):]
		switch {
		case rest == "":
			return bad("the door prefix %s names nobody", CLIPrefix)
		case hasCLIPrefix(rest):
			return bad("two door prefixes: %s names one person", CLIPrefix+"NAME")
		}
	}
	return n, nil
}

// hidden returns the first rune of s that does not show what it is.
func hidden(s string) (rune, bool) {
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.IsSpace(r) ||
			unicode.In(r, unicode.Cf, unicode.Co, unicode.Cs, unicode.Zl, unicode.Zp, unicode.Zs,
				unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point, unicode.Noncharacter_Code_Point) {
			return r, true
		}
	}
	return 0, false
}

func hasCLIPrefix(s string) bool {
	return len(s) >= len(CLIPrefix) && strings.EqualFold(s[:len(CLIPrefix)], CLIPrefix)
}

var fold = cases.Fold()

// person is the key SamePerson compares: the name without its door prefix,
// case folded; ok false when the name is not an approver's at all.
func person(name string) (string, bool) {
	n, err := Approver(name)
	if err != nil {
		return "", false
	}
	if hasCLIPrefix(n) {
		n = n[len(CLIPrefix):]
	}
	return fold.String(n), true
}

// SamePerson reports whether two principals name the same person however
// each was authenticated: the embedded CLI's cli:alice, the NATS approver
// alice and the HTTP token Alice are one person. Both are normalised by
// [Approver] and compared without the door prefix and without regard to
// case, so a submitter cannot approve their own task, nor one approver
// count twice toward a quorum, by answering through another door or in
// another spelling. A name [Approver] refuses is the same person as
// anyone: whatever asks, it is refused.
func SamePerson(a, b string) bool {
	if a == "" || b == "" {
		return false // nobody: Check refuses an unknown submitter itself
	}
	ka, oka := person(a)
	kb, okb := person(b)
	if !oka || !okb {
		return true
	}
	return ka == kb
}

// Reserved reports whether name is one no person answers as (the
// expiry's "timeout", in any case or spelling SamePerson takes for it).
func Reserved(name string) bool {
	k, ok := person(name)
	if !ok {
		return false
	}
	for _, r := range reserved {
		if k == r {
			return true
		}
	}
	return false
}
