// Package glob is the one matcher of tool-name patterns: rules' and agents'
// match_tool in package guards and the hooks' match_tool in package observers
// use it, so that a pattern means the same thing wherever it is written.
package glob

import (
	"strings"
	"unicode/utf8"
)

// Pattern matches a whole tool name against a shell pattern, with the semantics of
// Python's fnmatch.fnmatchcase, which the reference uses: case-sensitive; '*'
// matches any run of characters, '/' and '.' included; '?' matches one
// character; [seq] and [!seq] are classes with a-z ranges, where the first
// character (after '!') is literal even if it is ']' or '-', a '-' at the end
// is literal, and a reversed range matches nothing; a '[' with no closing ']'
// is a literal '['. Backslash has no special meaning. Go's path.Match differs
// ('*' stops at '/', backslash escapes), hence this matcher. One Python quirk is
// not copied: in "[]-!!a]", dropping the reversed range "]-!" leaves "!a", which
// Python then reads as a negated class; here it stays the literals '!' and 'a'.
type Pattern struct {
	kind  globKind
	lit   string // the literal for exact, prefix and suffix
	items []globItem
}

type globKind uint8

const (
	globExact globKind = iota
	globAny
	globPrefix
	globSuffix
	globGeneral
)

type globItem struct {
	op     globOp
	r      rune      // globLit
	ranges [][2]rune // globClass: inclusive ranges; reversed ones dropped
	negate bool      // globClass
}

type globOp uint8

const (
	globLit globOp = iota
	globOne
	globStar
	globClass
)

// Compile compiles a pattern. Every string is a pattern: a '[' without a
// closing ']' is a literal, so there is no error.
func Compile(pat string) Pattern {
	var items []globItem
	p := []rune(pat)
	for i := 0; i < len(p); {
		c := p[i]
		i++
		switch c {
		case '*':
			if len(items) == 0 || items[len(items)-1].op != globStar {
				items = append(items, globItem{op: globStar})
			}
		case '?':
			items = append(items, globItem{op: globOne})
		case '[':
			j := i
			if j < len(p) && p[j] == '!' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			for j < len(p) && p[j] != ']' {
				j++
			}
			if j >= len(p) {
				items = append(items, globItem{op: globLit, r: '['})
				continue
			}
			items = append(items, compileClass(p[i:j]))
			i = j + 1
		default:
			items = append(items, globItem{op: globLit, r: c})
		}
	}
	return simplifyGlob(items)
}

// compileClass compiles the inside of [...]. Python builds a regex class from
// it; the rules here give the same set: a '-' between two characters makes a
// range, except the '-' right after a range, which is literal.
func compileClass(s []rune) globItem {
	it := globItem{op: globClass}
	if len(s) > 0 && s[0] == '!' {
		it.negate = true
		s = s[1:]
	}
	for k := 0; k < len(s); {
		if k+2 < len(s) && s[k+1] == '-' {
			if s[k] <= s[k+2] {
				it.ranges = append(it.ranges, [2]rune{s[k], s[k+2]})
			}
			k += 3
			continue
		}
		it.ranges = append(it.ranges, [2]rune{s[k], s[k]})
		k++
	}
	return it
}

// simplifyGlob picks a fast path for the common shapes: a plain name, "*",
// "prefix*" and "*suffix".
func simplifyGlob(items []globItem) Pattern {
	stars, lits := 0, 0
	for _, it := range items {
		switch it.op {
		case globStar:
			stars++
		case globLit:
			lits++
		}
	}
	if lits != len(items)-stars {
		return Pattern{kind: globGeneral, items: items}
	}
	// Only literals and stars (a '[' without ']' is one of the literals).
	var lit strings.Builder
	for _, it := range items {
		if it.op == globLit {
			lit.WriteRune(it.r)
		}
	}
	switch {
	case stars == 0:
		return Pattern{kind: globExact, lit: lit.String()}
	case len(items) == 1:
		return Pattern{kind: globAny}
	case stars == 1 && items[len(items)-1].op == globStar:
		return Pattern{kind: globPrefix, lit: lit.String()}
	case stars == 1 && items[0].op == globStar:
		return Pattern{kind: globSuffix, lit: lit.String()}
	}
	return Pattern{kind: globGeneral, items: items}
}

// Match reports whether name matches the pattern as a whole.
func (g *Pattern) Match(name string) bool {
	switch g.kind {
	case globExact:
		return name == g.lit
	case globAny:
		return true
	case globPrefix:
		return strings.HasPrefix(name, g.lit)
	case globSuffix:
		return strings.HasSuffix(name, g.lit)
	}
	return g.matchGeneral(name)
}

// matchGeneral is the classic single-backtrack glob matcher: on a mismatch it
// retries from the last star, one character further on. Its cost is at most
// len(items) * len(name).
func (g *Pattern) matchGeneral(name string) bool {
	px, nx := 0, 0
	starPx, starNx := -1, -1
	for px < len(g.items) || nx < len(name) {
		if px < len(g.items) {
			it := &g.items[px]
			if it.op == globStar {
				starPx, starNx = px, nx
				px++
				continue
			}
			if nx < len(name) {
				r, size := utf8.DecodeRuneInString(name[nx:])
				if it.matches(r) {
					px++
					nx += size
					continue
				}
			}
		}
		if starPx >= 0 && starNx < len(name) {
			_, size := utf8.DecodeRuneInString(name[starNx:])
			starNx += size
			px, nx = starPx+1, starNx
			continue
		}
		return false
	}
	return true
}

func (it *globItem) matches(r rune) bool {
	switch it.op {
	case globLit:
		return it.r == r
	case globOne:
		return true
	case globClass:
		in := false
		for _, rg := range it.ranges {
			if rg[0] <= r && r <= rg[1] {
				in = true
				break
			}
		}
		return in != it.negate
	}
	return false
}
