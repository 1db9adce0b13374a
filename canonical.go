package noeta

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrInvalidJSON is returned (wrapped, with the byte offset and what is wrong) for text that is not a single valid JSON value, has a duplicate object key, or contains invalid UTF-8.
var ErrInvalidJSON = errors.New("noeta: invalid JSON")

// maxCanonicalDepth bounds nesting so that hostile input cannot exhaust the
// stack through recursion. It matches encoding/json's own limit, so anything
// accepted here is also accepted by encoding/json.
const maxCanonicalDepth = 10000

// CanonicalizeJSON returns the canonical form of the JSON text src.
// If src is already canonical it returns src itself (same backing array) without allocating.
//
// The canonical form exists so that equal values hash and compare equal as
// bytes. It is defined here, not by encoding/json, so that it stays stable
// across Go versions:
//
//  1. A single JSON value with no insignificant whitespace. Leading and
//     trailing whitespace is accepted in src.
//  2. Object members are sorted by key, comparing the decoded keys by
//     Unicode code point (the byte order of their UTF-8), so that the
//     order does not depend on how keys happened to be escaped. Duplicate
//     keys (after decoding escapes) are an error, because which one wins
//     differs between decoders.
//  3. Strings are pure ASCII, as with Python's json.dumps(ensure_ascii=True),
//     so the bytes survive any transport or log unchanged: `"` and `\` are
//     written as \" and \\; control characters as \b \f \n \r \t where a short
//     form exists, otherwise \u00XX (DEL, U+007F, counts as a control
//     character); every non-ASCII code point as \uXXXX, with a UTF-16
//     surrogate pair above U+FFFF. Hex digits are lowercase. '/', '<', '>'
//     and '&' are written literally. Escapes in src, including \/ and
//     needless ones like \u0061, are decoded and re-encoded by these rules.
//     Invalid UTF-8 and unpaired surrogate escapes are errors, since they
//     have no code point to encode.
//  4. An integer literal (no fraction or exponent) is kept exactly as
//     written, whatever its length, because converting it to float64 would
//     lose precision of IDs and amounts; only -0 becomes 0. Any other number
//     is rounded to float64 and written as ECMAScript's Number.toString
//     (RFC 8785) does: integral values below 1e21 in magnitude without a
//     fraction (1.0 -> 1, 1e2 -> 100, -0.0 -> 0); otherwise the shortest
//     digits that round-trip, in plain decimal for 1e-6 <= |v| < 1e21 and in
//     exponent form with an explicit sign and no leading zeros otherwise
//     (1e21 -> 1e+21, 1e-7 -> 1e-7). A number too large for float64 (1e400)
//     is an error; one too small for it becomes 0.
//  5. true, false and null are written as is.
//  6. Nesting deeper than 10000 arrays and objects is an error.
//
// Errors wrap ErrInvalidJSON and give the byte offset in src of the problem.
func CanonicalizeJSON(src []byte) ([]byte, error) {
	if IsCanonicalJSON(src) {
		return src, nil
	}
	e := canonEncoderPool.Get().(*canonEncoder)
	defer e.release()
	e.dst = e.own[:0]
	err := e.run(src)
	e.own = e.dst
	if err != nil {
		return nil, err
	}
	// The pooled buffer is reused, so the caller gets an exactly sized copy:
	// one allocation, and no spare capacity pinned by long-lived events.
	return e.emit(make([]byte, 0, len(e.dst)), 0, len(e.dst), 0), nil
}

// AppendCanonicalJSON appends the canonical form of src to dst.
// On error it returns dst unchanged (though bytes past len(dst) may have been
// overwritten).
func AppendCanonicalJSON(dst, src []byte) ([]byte, error) {
	if IsCanonicalJSON(src) {
		return append(dst, src...), nil
	}
	e := canonEncoderPool.Get().(*canonEncoder)
	defer e.release()
	e.dst = dst
	if err := e.run(src); err != nil {
		return dst, err
	}
	if len(e.reorders) > 0 {
		// Same length, so the sorted text can be copied back in place.
		e.scratch = e.emit(e.scratch[:0], len(dst), len(e.dst), 0)
		copy(e.dst[len(dst):], e.scratch)
	}
	return e.dst, nil
}

// Canonical marshals v with encoding/json and returns its canonical form.
// The payloads of a turn's records and a transcript's messages write theirs
// directly (the same bytes; see canonical_payloads.go).
func Canonical(v any) ([]byte, error) {
	if a, ok := v.(canonicalAppender); ok {
		if rv := reflect.ValueOf(v); rv.Kind() != reflect.Pointer || !rv.IsNil() {
			if b, ok := a.appendCanonical(make([]byte, 0, 128)); ok {
				return b, nil
			}
		}
	}
	return canonicalGeneral(v)
}

// canonicalGeneral is Canonical by encoding/json and CanonicalizeJSON.
func canonicalGeneral(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return CanonicalizeJSON(b)
}

// IsCanonicalJSON reports whether src is valid JSON already in canonical form. It does not allocate for typical payloads.
func IsCanonicalJSON(src []byte) bool {
	// A dedicated read-only check, rather than canonicalizing and comparing,
	// because it is the fast path of CanonicalizeJSON and most payloads are
	// already canonical.
	return canonVerifyValue(src, 0, 0) == len(src)
}

// canonStrSafe[c] reports whether byte c stands for itself inside a
// canonical string.
var canonStrSafe = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = true
	}
	t['"'] = false
	t['\\'] = false
	return t
}()

// canonMember is pointer-free so that pushing and sorting members needs no
// GC write barriers.
type canonMember struct {
	// prefix is the first 8 bytes of the decoded key, big-endian and
	// zero-padded. It orders keys like the keys themselves, except that
	// equal prefixes need a full comparison; that settles most comparisons
	// with one integer compare.
	prefix uint64
	// The decoded key is src[keyStart:keyEnd], or keys[keyStart:keyEnd] if
	// escaped: only keys with escapes are decoded into a copy.
	keyStart, keyEnd int
	escaped          bool
	keyOff           int // offset of the key in src, for the duplicate-key error
	start, end       int // the member's "key":value bytes in dst
	rec              int // index in reorders of the first object nested in it
}

func canonKeyPrefix(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var p uint64
	for i, c := range k {
		p |= uint64(c) << (56 - 8*i)
	}
	return p
}

func (e *canonEncoder) key(m *canonMember) []byte {
	if m.escaped {
		return e.keys[m.keyStart:m.keyEnd]
	}
	return e.src[m.keyStart:m.keyEnd]
}

// compareKeys orders members by decoded key.
func (e *canonEncoder) compareKeys(a, b *canonMember) int {
	if a.prefix != b.prefix {
		return cmp.Compare(a.prefix, b.prefix)
	}
	return bytes.Compare(e.key(a), e.key(b))
}

// compareMembers orders members by decoded key, then by position, so that
// the duplicate reported does not depend on the sort algorithm.
func (e *canonEncoder) compareMembers(a, b *canonMember) int {
	if c := e.compareKeys(a, b); c != 0 {
		return c
	}
	return cmp.Compare(a.keyOff, b.keyOff)
}

// canonSpan is a member's bytes in canonEncoder.dst. The reorders of the
// objects nested in it, if any, start at reorders[rec].
type canonSpan struct{ start, end, rec int }

// canonReorder is recorded, in the order objects open, for each object whose
// members are out of order or that contains such an object: the members,
// which are in dst between its '{' at open and its '}' at end, are to be
// emitted in the order spans[first:first+n] (n is 0 if they are in order).
// The reorders of the objects nested in it are reorders[i+1:after].
type canonReorder struct {
	open, end int
	first, n  int
	after     int
}

// canonEncoder holds the buffers of one canonicalization. It is pooled so
// that they are reused across calls instead of allocated per object.
//
// Canonicalization takes two passes. The first parses src and appends each
// member to dst in canonical form but in input order, recording for each
// object whose keys are out of order the order its members must have. The
// second (emit) copies dst following those records. Moving members in dst as
// each object ends would be simpler, but then a large value inside n
// unsorted objects would be moved n times: quadratic time on hostile input.
type canonEncoder struct {
	src   []byte
	pos   int
	depth int
	dst   []byte
	own   []byte // pooled output buffer for CanonicalizeJSON

	// members is a stack shared by all open objects: each object pushes its
	// members and pops them when it is done, so nesting needs no allocation.
	members []canonMember
	// keys holds decoded copies of keys that contained escapes; keys without
	// escapes are compared in place in src.
	keys []byte

	reorders []canonReorder
	spans    []canonSpan
	scratch  []byte
}

var canonEncoderPool = sync.Pool{New: func() any { return new(canonEncoder) }}

func (e *canonEncoder) release() {
	// Drop what a rare huge payload grew, so the pool does not pin it.
	const maxKeep = 64 << 10
	if cap(e.own) > maxKeep {
		e.own = nil
	}
	if cap(e.scratch) > maxKeep {
		e.scratch = nil
	}
	if cap(e.keys) > maxKeep {
		e.keys = nil
	}
	if cap(e.members) > 1024 {
		e.members = nil
	}
	if cap(e.reorders) > 1024 {
		e.reorders = nil
	}
	if cap(e.spans) > 4096 {
		e.spans = nil
	}
	e.src, e.dst = nil, nil
	e.members = e.members[:0]
	e.keys = e.keys[:0]
	e.reorders = e.reorders[:0]
	e.spans = e.spans[:0]
	canonEncoderPool.Put(e)
}

func canonErrorf(off int, format string, args ...any) error {
	return fmt.Errorf("%w at offset %d: %s", ErrInvalidJSON, off, fmt.Sprintf(format, args...))
}

func (e *canonEncoder) errEOF() error {
	return canonErrorf(len(e.src), "unexpected end of input")
}

func canonQuoteChar(c byte) string {
	if 0x20 <= c && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// run is the first pass: it appends src to dst in canonical form except for
// the order of object members, which it records in reorders.
func (e *canonEncoder) run(src []byte) error {
	e.src, e.pos, e.depth = src, 0, 0
	e.skipWS()
	if err := e.value(); err != nil {
		return err
	}
	e.skipWS()
	if e.pos < len(e.src) {
		return canonErrorf(e.pos, "invalid character %s after top-level value", canonQuoteChar(e.src[e.pos]))
	}
	return nil
}

// emit is the second pass: it appends dst[start:end] to out, with the
// members of the objects recorded in reorders[rec:] in their sorted order.
// Each byte is copied once.
func (e *canonEncoder) emit(out []byte, start, end, rec int) []byte {
	pos := start
	for i := rec; i < len(e.reorders) && e.reorders[i].open < end; {
		r := &e.reorders[i]
		if r.n == 0 {
			i++ // in order itself; look at what it contains
			continue
		}
		out = append(out, e.dst[pos:r.open+1]...)
		for k, m := range e.spans[r.first : r.first+r.n] {
			if k > 0 {
				out = append(out, ',')
			}
			out = e.emit(out, m.start, m.end, m.rec)
		}
		pos, i = r.end, r.after
	}
	return append(out, e.dst[pos:end]...)
}

func (e *canonEncoder) skipWS() {
	for e.pos < len(e.src) {
		switch e.src[e.pos] {
		case ' ', '\t', '\n', '\r':
			e.pos++
		default:
			return
		}
	}
}

func (e *canonEncoder) value() error {
	if e.pos >= len(e.src) {
		return e.errEOF()
	}
	switch c := e.src[e.pos]; c {
	case '{':
		return e.object()
	case '[':
		return e.array()
	case '"':
		_, _, _, err := e.str()
		return err
	case 't':
		return e.literal("true")
	case 'f':
		return e.literal("false")
	case 'n':
		return e.literal("null")
	default:
		if c == '-' || '0' <= c && c <= '9' {
			return e.number()
		}
		return canonErrorf(e.pos, "invalid character %s looking for beginning of value", canonQuoteChar(c))
	}
}

func (e *canonEncoder) literal(lit string) error {
	for i := 0; i < len(lit); i++ {
		p := e.pos + i
		if p >= len(e.src) {
			return e.errEOF()
		}
		if e.src[p] != lit[i] {
			return canonErrorf(p, "invalid character %s in literal %s", canonQuoteChar(e.src[p]), lit)
		}
	}
	e.dst = append(e.dst, lit...)
	e.pos += len(lit)
	return nil
}

func (e *canonEncoder) number() error {
	start := e.pos
	end, isInt, ok := canonScanNumber(e.src, start)
	if !ok {
		if end >= len(e.src) {
			return e.errEOF()
		}
		return canonErrorf(end, "invalid character %s in number", canonQuoteChar(e.src[end]))
	}
	e.pos = end
	lit := e.src[start:end]
	if isInt {
		if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
			lit = lit[1:]
		}
		e.dst = append(e.dst, lit...)
		return nil
	}
	if e.dst, ok = canonAppendFloatLiteral(e.dst, lit); !ok {
		return canonErrorf(start, "number %s overflows float64", lit)
	}
	return nil
}

// canonScanNumber scans the JSON number at src[i:]. If it is malformed, end
// is the offset of the offending byte (len(src) if truncated).
func canonScanNumber(src []byte, i int) (end int, isInt, ok bool) {
	isInt = true
	if i < len(src) && src[i] == '-' {
		i++
	}
	if i >= len(src) {
		return i, false, false
	}
	switch c := src[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i++
		for i < len(src) && '0' <= src[i] && src[i] <= '9' {
			i++
		}
	default:
		return i, false, false
	}
	if i < len(src) && src[i] == '.' {
		isInt = false
		i++
		if i >= len(src) || src[i] < '0' || src[i] > '9' {
			return i, false, false
		}
		for i < len(src) && '0' <= src[i] && src[i] <= '9' {
			i++
		}
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		isInt = false
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i >= len(src) || src[i] < '0' || src[i] > '9' {
			return i, false, false
		}
		for i < len(src) && '0' <= src[i] && src[i] <= '9' {
			i++
		}
	}
	return i, isInt, true
}

// canonAppendFloatLiteral appends the canonical form of lit, a syntactically
// valid JSON number with a fraction or exponent. It reports false if the
// value overflows float64.
func canonAppendFloatLiteral(dst, lit []byte) ([]byte, bool) {
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		// The syntax was checked already, so the only possible error is
		// overflow (underflow rounds to zero without error).
		return dst, false
	}
	return canonAppendFloat(dst, f), true
}

// canonAppendFloat formats f as ECMAScript's Number.prototype.toString does.
func canonAppendFloat(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also for -0
	}
	// 1e21 is exactly representable, and a double compares >= 1e-6 exactly
	// when its shortest decimal form does, so these comparisons match the
	// ECMAScript rule stated on decimal exponents.
	if a := math.Abs(f); 1e-6 <= a && a < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	n := len(dst)
	dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
	// strconv pads the exponent to two digits (1e-07); ECMAScript does not.
	if i := bytes.LastIndexByte(dst[n:], 'e') + n + 2; i+1 < len(dst) && dst[i] == '0' {
		dst[i] = dst[i+1]
		dst = dst[:len(dst)-1]
	}
	return dst
}

// str appends the canonical form of the string at e.pos, and returns the
// span of its raw contents in src and whether they contain escapes.
func (e *canonEncoder) str() (start, end int, escaped bool, err error) {
	src := e.src
	start = e.pos + 1
	i := start
	e.dst = append(e.dst, '"')
	for {
		j := i
		for j < len(src) && canonStrSafe[src[j]] {
			j++
		}
		e.dst = append(e.dst, src[i:j]...)
		if j >= len(src) {
			return 0, 0, false, e.errEOF()
		}
		switch c := src[j]; {
		case c == '"':
			e.dst = append(e.dst, '"')
			e.pos = j + 1
			return start, j, escaped, nil
		case c == '\\':
			escaped = true
			r, next, err := canonParseEscape(src, j)
			if err != nil {
				return 0, 0, false, err
			}
			e.dst = canonAppendRune(e.dst, r)
			i = next
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(src[j:])
			if r == utf8.RuneError && size == 1 {
				return 0, 0, false, canonErrorf(j, "invalid UTF-8 in string")
			}
			e.dst = canonAppendRune(e.dst, r)
			i = j + size
		case c == 0x7f:
			e.dst = canonAppendRune(e.dst, rune(c))
			i = j + 1
		default:
			return 0, 0, false, canonErrorf(j, "invalid control character %s in string", canonQuoteChar(c))
		}
	}
}

// canonParseEscape decodes the escape sequence at src[i] (a backslash),
// joining a surrogate pair into one rune, and returns the offset after it.
func canonParseEscape(src []byte, i int) (r rune, next int, err error) {
	if i+1 >= len(src) {
		return 0, 0, canonErrorf(len(src), "unexpected end of input")
	}
	switch c := src[i+1]; c {
	case '"', '\\', '/':
		return rune(c), i + 2, nil
	case 'b':
		return '\b', i + 2, nil
	case 'f':
		return '\f', i + 2, nil
	case 'n':
		return '\n', i + 2, nil
	case 'r':
		return '\r', i + 2, nil
	case 't':
		return '\t', i + 2, nil
	case 'u':
		r, ok := canonHex4(src, i+2, true)
		if !ok {
			return 0, 0, canonErrorf(i, "invalid \\u escape")
		}
		if !utf16.IsSurrogate(r) {
			return r, i + 6, nil
		}
		if r < 0xdc00 && i+12 <= len(src) && src[i+6] == '\\' && src[i+7] == 'u' {
			if r2, ok := canonHex4(src, i+8, true); ok && 0xdc00 <= r2 && r2 < 0xe000 {
				return utf16.DecodeRune(r, r2), i + 12, nil
			}
		}
		return 0, 0, canonErrorf(i, "unpaired surrogate escape %s", src[i:i+6])
	default:
		return 0, 0, canonErrorf(i, "invalid escape character %s in string", canonQuoteChar(c))
	}
}

// canonHex4 parses the four hex digits at src[i:]; upper-case digits are
// accepted only if upper is set, since canonical text has none.
func canonHex4(src []byte, i int, upper bool) (rune, bool) {
	if i+4 > len(src) {
		return 0, false
	}
	var r rune
	for _, c := range src[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case upper && 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

const canonHexDigits = "0123456789abcdef"

// canonAppendRune appends r as it appears inside a canonical string.
func canonAppendRune(dst []byte, r rune) []byte {
	switch r {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if 0x20 <= r && r < 0x7f {
		return append(dst, byte(r))
	}
	if r > 0xffff {
		r1, r2 := utf16.EncodeRune(r)
		dst = canonAppendU(dst, r1)
		return canonAppendU(dst, r2)
	}
	return canonAppendU(dst, r)
}

// canonRuneLen is how many bytes canonAppendRune writes for r.
func canonRuneLen(r rune) int {
	switch r {
	case '"', '\\', '\b', '\f', '\n', '\r', '\t':
		return 2
	}
	switch {
	case 0x20 <= r && r < 0x7f:
		return 1
	case r > 0xffff:
		return 12
	}
	return 6
}

// CanonicalPrefix returns the longest prefix of s, cut between runes,
// whose canonical JSON string (quotes included) is at most limit bytes: a
// text cut to fit a record. A byte that is not UTF-8 counts as the
// \ufffd it is written as.
func CanonicalPrefix(s string, limit int) string {
	n := 2
	if limit < n {
		return ""
	}
	for i, r := range s {
		if n += canonRuneLen(r); n > limit {
			return s[:i]
		}
	}
	return s
}

func canonAppendU(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u',
		canonHexDigits[r>>12&0xf], canonHexDigits[r>>8&0xf],
		canonHexDigits[r>>4&0xf], canonHexDigits[r&0xf])
}

// canonAppendDecoded appends the UTF-8 text of raw, the already validated
// contents of a JSON string.
func canonAppendDecoded(dst, raw []byte) []byte {
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:i]...)
		r, next, _ := canonParseEscape(raw, i)
		dst = utf8.AppendRune(dst, r)
		raw = raw[next:]
	}
	return dst
}

func (e *canonEncoder) array() error {
	if e.depth++; e.depth > maxCanonicalDepth {
		return canonErrorf(e.pos, "nesting deeper than %d", maxCanonicalDepth)
	}
	e.pos++
	e.dst = append(e.dst, '[')
	e.skipWS()
	if e.pos < len(e.src) && e.src[e.pos] == ']' {
		e.pos++
		e.dst = append(e.dst, ']')
		e.depth--
		return nil
	}
	for {
		if err := e.value(); err != nil {
			return err
		}
		e.skipWS()
		if e.pos >= len(e.src) {
			return e.errEOF()
		}
		c := e.src[e.pos]
		if c == ',' {
			e.pos++
			e.dst = append(e.dst, ',')
			e.skipWS()
			continue
		}
		if c != ']' {
			return canonErrorf(e.pos, "invalid character %s after array element", canonQuoteChar(c))
		}
		e.pos++
		e.dst = append(e.dst, ']')
		e.depth--
		return nil
	}
}

func (e *canonEncoder) object() error {
	if e.depth++; e.depth > maxCanonicalDepth {
		return canonErrorf(e.pos, "nesting deeper than %d", maxCanonicalDepth)
	}
	e.pos++
	open := len(e.dst)
	e.dst = append(e.dst, '{')
	e.skipWS()
	if e.pos < len(e.src) && e.src[e.pos] == '}' {
		e.pos++
		e.dst = append(e.dst, '}')
		e.depth--
		return nil
	}
	mark, keysMark := len(e.members), len(e.keys)
	// Reserve this object's place among the reorders, which emit needs in
	// the order objects open; it is dropped below if not needed.
	rec := len(e.reorders)
	e.reorders = append(e.reorders, canonReorder{})
	sorted := true
	for {
		if e.pos >= len(e.src) {
			return e.errEOF()
		}
		if e.src[e.pos] != '"' {
			return canonErrorf(e.pos, "invalid character %s looking for beginning of object key", canonQuoteChar(e.src[e.pos]))
		}
		m := canonMember{keyOff: e.pos, start: len(e.dst), rec: len(e.reorders)}
		ks, ke, escaped, err := e.str()
		if err != nil {
			return err
		}
		key := e.src[ks:ke]
		if escaped {
			// Nested objects append their keys after this one and truncate
			// back to their own mark, so this copy stays intact.
			k := len(e.keys)
			e.keys = canonAppendDecoded(e.keys, key)
			key = e.keys[k:]
			ks, ke = k, len(e.keys)
		}
		m.prefix, m.keyStart, m.keyEnd, m.escaped = canonKeyPrefix(key), ks, ke, escaped
		if sorted && len(e.members) > mark && e.compareKeys(&e.members[len(e.members)-1], &m) >= 0 {
			sorted = false
		}
		e.skipWS()
		if e.pos >= len(e.src) {
			return e.errEOF()
		}
		if e.src[e.pos] != ':' {
			return canonErrorf(e.pos, "invalid character %s after object key", canonQuoteChar(e.src[e.pos]))
		}
		e.pos++
		e.dst = append(e.dst, ':')
		e.skipWS()
		if err := e.value(); err != nil {
			return err
		}
		m.end = len(e.dst)
		e.members = append(e.members, m)
		e.skipWS()
		if e.pos >= len(e.src) {
			return e.errEOF()
		}
		c := e.src[e.pos]
		if c == ',' {
			e.pos++
			e.dst = append(e.dst, ',')
			e.skipWS()
			continue
		}
		if c != '}' {
			return canonErrorf(e.pos, "invalid character %s after object member", canonQuoteChar(c))
		}
		break
	}
	if !sorted {
		if err := e.reorder(rec, open, e.members[mark:]); err != nil {
			return err
		}
	} else if len(e.reorders) == rec+1 {
		e.reorders = e.reorders[:rec]
	} else {
		e.reorders[rec] = canonReorder{open: open, after: len(e.reorders)}
	}
	e.members = e.members[:mark]
	e.keys = e.keys[:keysMark]
	e.pos++
	e.dst = append(e.dst, '}')
	e.depth--
	return nil
}

// reorder sorts the members of the object whose '{' is at dst[open] and
// records their order for emit in reorders[rec].
func (e *canonEncoder) reorder(rec, open int, ms []canonMember) error {
	// Objects are small, so an insertion sort of byte indexes on the stack
	// beats moving the members themselves or the generic sort's indirect
	// calls.
	var idxArr [32]uint8
	var idx []uint8
	if len(ms) <= len(idxArr) {
		idx = idxArr[:len(ms)]
		for i := range idx {
			idx[i] = uint8(i)
			for j := i; j > 0 && e.compareMembers(&ms[idx[j-1]], &ms[i]) > 0; j-- {
				idx[j], idx[j-1] = idx[j-1], uint8(i)
			}
		}
	} else {
		slices.SortFunc(ms, func(a, b canonMember) int { return e.compareMembers(&a, &b) })
	}
	at := func(i int) *canonMember {
		if idx != nil {
			return &ms[idx[i]]
		}
		return &ms[i]
	}
	dup := -1
	for i := 1; i < len(ms); i++ {
		a, b := at(i-1), at(i)
		if a.prefix == b.prefix && bytes.Equal(e.key(a), e.key(b)) && (dup < 0 || b.keyOff < at(dup).keyOff) {
			dup = i
		}
	}
	if dup >= 0 {
		m := at(dup)
		key := e.key(m)
		if len(key) > 64 {
			key = key[:64]
		}
		return canonErrorf(m.keyOff, "duplicate object key %q", key)
	}
	e.reorders[rec] = canonReorder{open: open, end: len(e.dst), first: len(e.spans), n: len(ms), after: len(e.reorders)}
	for i := range ms {
		m := at(i)
		e.spans = append(e.spans, canonSpan{m.start, m.end, m.rec})
	}
	return nil
}

// canonVerifyValue checks that the value at src[i:] is canonical and returns
// the offset after it, or -1. It must accept exactly the outputs of
// canonEncoder, which FuzzCanonicalizeJSON checks.
func canonVerifyValue(src []byte, i, depth int) int {
	if i >= len(src) {
		return -1
	}
	switch c := src[i]; c {
	case '{':
		if depth++; depth > maxCanonicalDepth {
			return -1
		}
		i++
		if i < len(src) && src[i] == '}' {
			return i + 1
		}
		prevStart, prevEnd, prevEscaped := -1, -1, false
		for {
			if i >= len(src) || src[i] != '"' {
				return -1
			}
			end, escaped := canonVerifyString(src, i)
			if end < 0 {
				return -1
			}
			ks, ke := i+1, end-1
			if prevStart >= 0 {
				var order int
				if escaped || prevEscaped {
					order = canonCompareEncoded(src[prevStart:prevEnd], src[ks:ke])
				} else {
					order = bytes.Compare(src[prevStart:prevEnd], src[ks:ke])
				}
				if order >= 0 {
					return -1
				}
			}
			prevStart, prevEnd, prevEscaped = ks, ke, escaped
			if end >= len(src) || src[end] != ':' {
				return -1
			}
			if i = canonVerifyValue(src, end+1, depth); i < 0 || i >= len(src) {
				return -1
			}
			if src[i] == '}' {
				return i + 1
			}
			if src[i] != ',' {
				return -1
			}
			i++
		}
	case '[':
		if depth++; depth > maxCanonicalDepth {
			return -1
		}
		i++
		if i < len(src) && src[i] == ']' {
			return i + 1
		}
		for {
			if i = canonVerifyValue(src, i, depth); i < 0 || i >= len(src) {
				return -1
			}
			if src[i] == ']' {
				return i + 1
			}
			if src[i] != ',' {
				return -1
			}
			i++
		}
	case '"':
		end, _ := canonVerifyString(src, i)
		return end
	case 't':
		return canonVerifyLiteral(src, i, "true")
	case 'f':
		return canonVerifyLiteral(src, i, "false")
	case 'n':
		return canonVerifyLiteral(src, i, "null")
	default:
		end, isInt, ok := canonScanNumber(src, i)
		if !ok {
			return -1
		}
		lit := src[i:end]
		if isInt {
			if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
				return -1
			}
			return end
		}
		var buf [32]byte
		if out, ok := canonAppendFloatLiteral(buf[:0], lit); !ok || !bytes.Equal(out, lit) {
			return -1
		}
		return end
	}
}

func canonVerifyLiteral(src []byte, i int, lit string) int {
	if len(src)-i < len(lit) || string(src[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// canonVerifyString checks that the string at src[i] (a quote) is in
// canonical form and returns the offset after it, or -1, and whether it
// contains escapes.
func canonVerifyString(src []byte, i int) (end int, escaped bool) {
	i++
	for i < len(src) {
		c := src[i]
		if canonStrSafe[c] {
			i++
			continue
		}
		if c == '"' {
			return i + 1, escaped
		}
		if c != '\\' || i+1 >= len(src) {
			return -1, false
		}
		escaped = true
		switch src[i+1] {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			i += 2
			continue
		case 'u':
		default:
			return -1, false
		}
		r, ok := canonHex4(src, i+2, false)
		if !ok {
			return -1, false
		}
		switch {
		case r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
			return -1, false // has a short form
		case 0x20 <= r && r < 0x7f:
			return -1, false // printable ASCII stands for itself
		case 0xdc00 <= r && r < 0xe000:
			return -1, false // low surrogate without a high one
		case 0xd800 <= r && r < 0xdc00:
			if i+12 > len(src) || src[i+6] != '\\' || src[i+7] != 'u' {
				return -1, false
			}
			r2, ok := canonHex4(src, i+8, false)
			if !ok || r2 < 0xdc00 || r2 >= 0xe000 {
				return -1, false
			}
			i += 6
		}
		i += 6
	}
	return -1, false
}

// canonCompareEncoded compares two canonical string contents by the code
// points they encode.
func canonCompareEncoded(a, b []byte) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ra, ni := canonNextRune(a, i)
		rb, nj := canonNextRune(b, j)
		if ra != rb {
			return cmp.Compare(ra, rb)
		}
		i, j = ni, nj
	}
	// At least one is exhausted; the other, if not, is the greater.
	return cmp.Compare(len(a)-i, len(b)-j)
}

func canonNextRune(s []byte, i int) (rune, int) {
	if s[i] != '\\' {
		return rune(s[i]), i + 1
	}
	r, next, _ := canonParseEscape(s, i)
	return r, next
}
