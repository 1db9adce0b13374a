package guards

import (
	"bytes"
	"regexp/syntax"
	"slices"
	"unicode/utf8"
)

// maxRequiredLiterals bounds the alternatives a prefilter tries; beyond it
// the regex runs unfiltered.
const maxRequiredLiterals = 8

// requiredLiterals returns strings of which every match of the pattern must
// contain at least one, or nil if it cannot tell. Rules exist to catch the rare
// bad call, so almost every regex evaluation is a miss; a substring search
// settles most misses at a fraction of the cost of Go's regexp engine.
func requiredLiterals(pattern string) [][]byte {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil
	}
	lits := required(re.Simplify())
	if len(lits) == 0 || len(lits) > maxRequiredLiterals {
		return nil
	}
	out := make([][]byte, len(lits))
	for i, l := range lits {
		out[i] = []byte(l)
	}
	return out
}

// required returns a set of literals one of which every match contains; nil
// means no constraint is known. It is conservative: wherever in doubt it says
// nothing.
func required(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		// A regexp reads an invalid byte as U+FFFD, which a byte search
		// would not find: no prefilter for patterns that name it.
		if re.Flags&syntax.FoldCase != 0 || len(re.Rune) == 0 || slices.Contains(re.Rune, utf8.RuneError) {
			return nil
		}
		return []string{string(re.Rune)}
	case syntax.OpCapture:
		return required(re.Sub[0])
	case syntax.OpPlus:
		return required(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return required(re.Sub[0])
		}
		return nil
	case syntax.OpConcat:
		// Any one element's requirement holds for the whole; keep the most
		// selective: fewest alternatives, then the longest shortest literal.
		var best []string
		for _, sub := range re.Sub {
			if r := required(sub); r != nil && better(r, best) {
				best = r
			}
		}
		return best
	case syntax.OpAlternate:
		var all []string
		for _, sub := range re.Sub {
			r := required(sub)
			if r == nil {
				return nil
			}
			all = append(all, r...)
		}
		slices.Sort(all)
		return slices.Compact(all)
	}
	return nil
}

func better(a, b []string) bool {
	if b == nil {
		return true
	}
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	return minLen(a) > minLen(b)
}

func minLen(s []string) int {
	m := len(s[0])
	for _, x := range s[1:] {
		m = min(m, len(x))
	}
	return m
}

// mayMatch reports whether s contains one of the required literals.
func mayMatch(lits [][]byte, s []byte) bool {
	if lits == nil {
		return true
	}
	for _, l := range lits {
		if bytes.Contains(s, l) {
			return true
		}
	}
	return false
}
