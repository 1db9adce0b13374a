package glob

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestGlob(t *testing.T) {
	tests := []struct {
		pat, name string
		want      bool
	}{
		{"shell", "shell", true},
		{"shell", "Shell", false}, // case-sensitive
		{"shell", "shell2", false},
		{"", "", true},
		{"", "x", false},
		{"*", "", true},
		{"*", "a/b.c_d", true}, // '*' crosses '/' and '.'
		{"**", "abc", true},
		{"mcp__*", "mcp__github__create_issue", true},
		{"mcp__*", "mcp_github", false},
		{"*_file", "read_file", true},
		{"*_file", "file", false},
		{"read_*", "read_", true},
		{"*.go", "dir/sub/x.go", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "abcb", false},
		{"a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false},
		{"x*", "", false},
		{"*x", "x", true},
		{"?", "é", true}, // one character, not one byte
		{"??", "é", false},
		{"?ell", "shell", false},
		{"[abc]x", "bx", true},
		{"[!abc]x", "bx", false},
		{"[!abc]x", "dx", true},
		{"[a-c]", "b", true},
		{"[a-c]", "d", false},
		{"[c-a]", "b", false}, // a reversed range matches nothing
		{"[!c-a]", "b", true}, // ...and its negation anything
		{"[]]", "]", true},    // ']' first is literal
		{"[!]]", "a", true},
		{"[!]]", "]", false},
		{"[a-]", "-", true}, // '-' last is literal
		{"[-a]", "-", true}, // '-' first is literal
		{"[a-b-c]", "-", true},
		{"[a-b-c]", "c", true},
		{"[a-b-c]", "d", false},
		{"[", "[", true}, // no closing ']': a literal '['
		{"a[b", "a[b", true},
		{"[!]", "[!]", true},
		{`\*`, `\anything`, true}, // backslash is not an escape
		{`\*`, `*`, false},
		{"a-b-c", "a-b-c", true},
		{"[é-ë]", "ê", true},
	}
	for _, tt := range tests {
		g := Compile(tt.pat)
		if got := g.Match(tt.name); got != tt.want {
			t.Errorf("glob %q matching %q = %v, want %v", tt.pat, tt.name, got, tt.want)
		}
	}
}

// pyTranslate is Python 3.12's fnmatch.translate, line by line, producing a Go
// regexp: the reference the glob is checked against. quirk reports the one
// place we differ on purpose: when removing a reversed range at the start of a
// class leaves a '!' first, as in "[]-!!a]", Python reads that '!' as a
// negation it never was; the glob keeps it a literal.
func pyTranslate(pattern string) (re string, quirk bool) {
	pat := []rune(pattern)
	var res []string
	const star = "\x00STAR"
	i, n := 0, len(pat)
	for i < n {
		c := pat[i]
		i++
		switch c {
		case '*':
			if len(res) == 0 || res[len(res)-1] != star {
				res = append(res, star)
			}
		case '?':
			res = append(res, ".")
		case '[':
			j := i
			if j < n && pat[j] == '!' {
				j++
			}
			if j < n && pat[j] == ']' {
				j++
			}
			for j < n && pat[j] != ']' {
				j++
			}
			if j >= n {
				res = append(res, `\[`)
				continue
			}
			var stuff string
			negated := pat[i] == '!'
			if !slices.Contains(pat[i:j], '-') {
				stuff = strings.ReplaceAll(string(pat[i:j]), `\`, `\\`)
			} else {
				var chunks [][]rune
				k := i + 1
				if pat[i] == '!' {
					k = i + 2
				}
				for {
					k = indexRune(pat, '-', k, j)
					if k < 0 {
						break
					}
					chunks = append(chunks, slices.Clone(pat[i:k]))
					i = k + 1
					k = k + 3
				}
				if chunk := pat[i:j]; len(chunk) > 0 {
					chunks = append(chunks, slices.Clone(chunk))
				} else {
					chunks[len(chunks)-1] = append(chunks[len(chunks)-1], '-')
				}
				for k := len(chunks) - 1; k > 0; k-- {
					if prev := chunks[k-1]; prev[len(prev)-1] > chunks[k][0] {
						chunks[k-1] = append(prev[:len(prev)-1:len(prev)-1], chunks[k][1:]...)
						chunks = slices.Delete(chunks, k, k+1)
					}
				}
				parts := make([]string, len(chunks))
				for k, ch := range chunks {
					parts[k] = strings.ReplaceAll(strings.ReplaceAll(string(ch), `\`, `\\`), "-", `\-`)
				}
				stuff = strings.Join(parts, "-")
				if !negated && strings.HasPrefix(stuff, "!") {
					quirk = true
				}
			}
			stuff = regexp.MustCompile(`([&~|])`).ReplaceAllString(stuff, `\$1`)
			i = j + 1
			switch {
			case stuff == "":
				res = append(res, `[^\x00-\x{10FFFF}]`) // Python's (?!): never matches
			case stuff == "!":
				res = append(res, ".")
			default:
				if stuff[0] == '!' {
					stuff = "^" + stuff[1:]
				} else if stuff[0] == '^' || stuff[0] == '[' {
					stuff = `\` + stuff
				}
				res = append(res, "["+stuff+"]")
			}
		default:
			res = append(res, regexp.QuoteMeta(string(c)))
		}
	}
	for k, r := range res {
		if r == star {
			res[k] = ".*"
		}
	}
	return `^(?s:` + strings.Join(res, "") + `)\z`, quirk
}

func indexRune(s []rune, r rune, from, to int) int {
	for k := from; k < to && k < len(s); k++ {
		if s[k] == r {
			return k
		}
	}
	return -1
}

// TestGlobMatchesPythonFnmatch compares the glob with Python's translation on
// random patterns over the characters that matter.
func TestGlobMatchesPythonFnmatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 7))
	const nameChars = `ab-!]^[\&`
	pick := func(chars string, max int) string {
		n := rng.IntN(max + 1)
		var b strings.Builder
		for range n {
			b.WriteByte(chars[rng.IntN(len(chars))])
		}
		return b.String()
	}
	// Patterns are built from tokens, classes often, so that ranges, '!',
	// ']' and '-' in every position come up.
	pattern := func() string {
		var b strings.Builder
		for range rng.IntN(5) {
			switch rng.IntN(6) {
			case 0:
				b.WriteByte('*')
			case 1:
				b.WriteByte('?')
			case 2, 3:
				b.WriteString("[" + pick(`ab-!]^\&|`, 5) + "]")
			default:
				b.WriteString(pick(`ab-!][\^&|`, 2))
			}
		}
		return b.String()
	}
	checked := 0
	for range 20000 {
		pat := pattern()
		src, quirk := pyTranslate(pat)
		if quirk {
			continue
		}
		re, err := regexp.Compile(src)
		if err != nil {
			t.Fatalf("translation of %q does not compile: %v", pat, err)
		}
		g := Compile(pat)
		for range 8 {
			name := pick(nameChars, 6)
			if got, want := g.Match(name), re.MatchString(name); got != want {
				t.Fatalf("glob %q matching %q = %v, Python's fnmatchcase says %v (regexp %s)", pat, name, got, want, re)
			}
			checked++
		}
	}
	t.Logf("%d pattern/name pairs agree", checked)
}

// FuzzMatch compares the matcher with Python's fnmatchcase (pyTranslate) on
// arbitrary patterns and names.
func FuzzMatch(f *testing.F) {
	for _, s := range [][2]string{{"*", "x"}, {"[a-c]?*", "bx"}, {"[!]-a]x", "]x"}, {"a*b?c", "aXbYc"}, {"mcp__*", "mcp__git"}, {"[", "["}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pat, name string) {
		got := Compile(pat)
		if len(pat) > 64 || len(name) > 64 || !utf8.ValidString(pat) || !utf8.ValidString(name) {
			got.Match(name) // must not panic
			return          // keep the regexp translation cheap; invalid UTF-8 decodes differently
		}
		src, quirk := pyTranslate(pat)
		if quirk {
			return
		}
		re, err := regexp.Compile(src)
		if err != nil {
			return // a pattern Go's regexp cannot express ([:...:] inside a class)
		}
		if want := re.MatchString(name); got.Match(name) != want {
			t.Fatalf("glob %q matching %q = %v, fnmatchcase says %v", pat, name, !want, want)
		}
	})
}
