// Package fieldpath spells the path of a field of noeta.yaml the way every
// error names it: agents.researcher.budget.max_cost_usd, rules[2].match_arg,
// agents."my agent".tools[0]. Package guards names the fields it checks with
// it and package config finds their lines by it, so both must spell a path
// the same way: one package, one spelling.
package fieldpath

import (
	"strconv"
	"strings"
)

// Join appends a key to a path, quoting a key that is not plain.
func Join(path, key string) string {
	if !isPlain(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index appends a sequence index to a path.
func Index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Parent drops the last element of a path; the parent of a single key is "".
func Parent(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if strings.HasSuffix(p, `"`) {
		// A quoted key: find its opening quote.
		for i := len(p) - 2; i >= 0; i-- {
			if p[i] == '"' && (i == 0 || p[i-1] == '.') {
				return strings.TrimSuffix(p[:i], ".")
			}
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// isPlain reports whether a key can be written in a path without quotes.
func isPlain(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
