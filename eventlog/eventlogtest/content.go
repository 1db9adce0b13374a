package eventlogtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

var contentCases = []suiteCase{
	{"PutGet", testPutGet},
	{"PutSameBytesOtherMediaType", testPutSameBytes},
	{"BodiesAreImmutable", testBodiesImmutable},
	{"GetMissing", testGetMissing},
	{"GetMany", testGetMany},
	{"GetManyEmpty", testGetManyEmpty},
	{"Spill", testSpill},
	{"SpillString", testSpillString},
	{"CancelledContent", testCancelledContent},
	{"ClosedContent", testClosedContent},
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func mustPut(t *testing.T, b Backend, body []byte, mediaType string) noeta.ContentRef {
	t.Helper()
	ref, err := b.Content.Put(t.Context(), body, mediaType)
	if err != nil {
		t.Fatalf("Put(%d bytes, %s): got error %v, want nil", len(body), mediaType, err)
	}
	return ref
}

func mustGet(t *testing.T, b Backend, ref noeta.ContentRef) []byte {
	t.Helper()
	body, err := b.Content.Get(t.Context(), ref)
	if err != nil {
		t.Fatalf("Get(%s): got error %v, want nil", ref.Hash, err)
	}
	return body
}

// uniqueBody is a body no other case writes.
func uniqueBody(what string) []byte { return []byte(what + " " + noeta.NewID()) }

func testPutGet(t *testing.T, b Backend) {
	body := uniqueBody("hello, content store")
	ref := mustPut(t, b, body, "text/plain")
	want := noeta.ContentRef{Hash: sha256Hex(body), Size: int64(len(body)), MediaType: "text/plain"}
	if ref != want {
		t.Errorf("Put: got ref %+v, want %+v", ref, want)
	}
	if err := ref.Validate(); err != nil || strings.ToLower(ref.Hash) != ref.Hash {
		t.Errorf("ref hash %q: want 64 lowercase hex digits (%v)", ref.Hash, err)
	}
	if got := mustGet(t, b, ref); !bytes.Equal(got, body) {
		t.Errorf("Get: got %q, want %q", got, body)
	}
	// Lookup is by hash only.
	if got := mustGet(t, b, noeta.ContentRef{Hash: ref.Hash, Size: 1, MediaType: "application/octet-stream"}); !bytes.Equal(got, body) {
		t.Errorf("Get by hash with another size and media type: got %q, want %q", got, body)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 64*1024) // 1 MiB
	bigRef := mustPut(t, b, big, "application/octet-stream")
	if bigRef.Size != int64(len(big)) || bigRef.Hash != sha256Hex(big) {
		t.Errorf("Put of 1 MiB: got %+v, want size %d hash %s", bigRef, len(big), sha256Hex(big))
	}
	if got := mustGet(t, b, bigRef); !bytes.Equal(got, big) {
		t.Errorf("Get of 1 MiB: got %d bytes back, want the same %d bytes", len(got), len(big))
	}
}

func testPutSameBytes(t *testing.T, b Backend) {
	body := uniqueBody(`{"same":"bytes"}`)
	first := mustPut(t, b, body, eventlog.MediaTypeJSON)
	second := mustPut(t, b, body, "text/plain")
	if second.Hash != first.Hash || second.Size != first.Size {
		t.Errorf("second Put: got hash %s size %d, want %s %d", second.Hash, second.Size, first.Hash, first.Size)
	}
	if first.MediaType != eventlog.MediaTypeJSON || second.MediaType != "text/plain" {
		t.Errorf("media types: got %q and %q, want each caller's: %q and %q", first.MediaType, second.MediaType, eventlog.MediaTypeJSON, "text/plain")
	}
	if got := mustGet(t, b, second); !bytes.Equal(got, body) {
		t.Errorf("Get after the second Put: got %q, want %q", got, body)
	}
}

func testBodiesImmutable(t *testing.T, b Backend) {
	body := uniqueBody("immutable")
	orig := bytes.Clone(body)
	ref := mustPut(t, b, body, "text/plain")
	body[0] = 'X' // the caller reuses its buffer
	got := mustGet(t, b, ref)
	if !bytes.Equal(got, orig) {
		t.Fatalf("Get after the caller changed its buffer: got %q, want %q", got, orig)
	}
	got[0] = 'Y' // a reader scribbles on what it got
	if again := mustGet(t, b, ref); !bytes.Equal(again, orig) {
		t.Errorf("Get after a reader changed its copy: got %q, want %q", again, orig)
	}
}

func testGetMissing(t *testing.T, b Backend) {
	missing := noeta.RefFor(uniqueBody("never stored"), "text/plain")
	_, err := b.Content.Get(t.Context(), missing)
	checkErrIs(t, "Get of a missing hash", err, eventlog.ErrNotFound)
}

func testGetMany(t *testing.T, b Backend) {
	b1, b2 := uniqueBody("one"), uniqueBody("two")
	r1 := mustPut(t, b, b1, "text/plain")
	r2 := mustPut(t, b, b2, "text/plain")
	missing := noeta.RefFor(uniqueBody("missing"), "text/plain")
	got, err := b.Content.GetMany(t.Context(), []noeta.ContentRef{r1, missing, r2, r1, {Hash: r2.Hash, MediaType: "x/y"}})
	wantNoErr(t, "GetMany", err)
	if len(got) != 2 {
		t.Errorf("GetMany: got %d entries, want 2 (missing left out, duplicates collapsed)", len(got))
	}
	if !bytes.Equal(got[r1.Hash], b1) || !bytes.Equal(got[r2.Hash], b2) {
		t.Errorf("GetMany: got %q and %q, want %q and %q", got[r1.Hash], got[r2.Hash], b1, b2)
	}
	if _, ok := got[missing.Hash]; ok {
		t.Errorf("GetMany: the missing hash is in the result, want it left out")
	}
	none, err := b.Content.GetMany(t.Context(), []noeta.ContentRef{missing})
	wantNoErr(t, "GetMany of a missing hash only", err)
	if len(none) != 0 {
		t.Errorf("GetMany of a missing hash only: got %d entries, want 0", len(none))
	}
}

func testGetManyEmpty(t *testing.T, b Backend) {
	for _, refs := range [][]noeta.ContentRef{nil, {}} {
		got, err := b.Content.GetMany(t.Context(), refs)
		wantNoErr(t, "GetMany of no refs", err)
		if got == nil || len(got) != 0 {
			t.Errorf("GetMany(%#v): got %#v, want an empty, non-nil map", refs, got)
		}
	}
}

func testSpill(t *testing.T, b Backend) {
	ctx := t.Context()
	inline, ref, err := eventlog.Spill(ctx, b.Content, json.RawMessage(`{"b":1, "a":2}`), 100)
	wantNoErr(t, "Spill under the limit", err)
	if string(inline) != `{"a":2,"b":1}` || ref != nil {
		t.Errorf("Spill under the limit: got %s, %+v, want %s and no ref", inline, ref, `{"a":2,"b":1}`)
	}
	exact := sizedPayload(100)
	inline, ref, err = eventlog.Spill(ctx, b.Content, json.RawMessage(exact), 100)
	wantNoErr(t, "Spill at the limit", err)
	if string(inline) != exact || ref != nil {
		t.Errorf("Spill at the limit: got %d bytes inline and ref %+v, want the body inline", len(inline), ref)
	}

	body := `{ "items" : [` + strings.Repeat(`"`+noeta.NewID()+`", `, 100) + `"end"] }`
	canon, err := noeta.CanonicalizeJSON([]byte(body))
	wantNoErr(t, "CanonicalizeJSON", err)
	inline, ref, err = eventlog.Spill(ctx, b.Content, json.RawMessage(body), 100)
	wantNoErr(t, "Spill over the limit", err)
	if inline != nil || ref == nil {
		t.Fatalf("Spill over the limit: got inline %d bytes and ref %+v, want only a ref", len(inline), ref)
	}
	if ref.Hash != sha256Hex(canon) || ref.Size != int64(len(canon)) || ref.MediaType != eventlog.MediaTypeJSON {
		t.Errorf("spilled ref: got %+v, want hash %s size %d media type %s", *ref, sha256Hex(canon), len(canon), eventlog.MediaTypeJSON)
	}
	if got := mustGet(t, b, *ref); !bytes.Equal(got, canon) {
		t.Errorf("spilled body: got %d bytes, want the %d canonical bytes", len(got), len(canon))
	}
}

func testSpillString(t *testing.T, b Backend) {
	ctx := t.Context()
	s, ref, err := eventlog.SpillString(ctx, b.Content, "short goal", noeta.GoalInlineLimit)
	wantNoErr(t, "SpillString under the limit", err)
	if s != "short goal" || ref != nil {
		t.Errorf("SpillString under the limit: got %q, %+v, want the text inline", s, ref)
	}
	long := strings.Repeat("a long goal with <html> & \"quotes\" é ", 200) + noeta.NewID()
	s, ref, err = eventlog.SpillString(ctx, b.Content, long, noeta.GoalInlineLimit)
	wantNoErr(t, "SpillString over the limit", err)
	if s != "" || ref == nil {
		t.Fatalf("SpillString over the limit: got %d bytes inline and ref %+v, want \"\" and a ref", len(s), ref)
	}
	body := mustGet(t, b, *ref)
	var back string
	if err := json.Unmarshal(body, &back); err != nil || back != long {
		t.Errorf("spilled text: got %q (%v), want the original text", back, err)
	}
	if ref.Hash != sha256Hex(body) || ref.MediaType != eventlog.MediaTypeJSON {
		t.Errorf("spilled ref: got %+v, want hash %s media type %s", *ref, sha256Hex(body), eventlog.MediaTypeJSON)
	}
}

func contentCalls(c eventlog.ContentStore, stored noeta.ContentRef) []call {
	return []call{
		{"Put", func(ctx context.Context) error { _, err := c.Put(ctx, []byte("body"), "text/plain"); return err }},
		{"Get", func(ctx context.Context) error { _, err := c.Get(ctx, stored); return err }},
		{"GetMany", func(ctx context.Context) error { _, err := c.GetMany(ctx, []noeta.ContentRef{stored}); return err }},
	}
}

func testCancelledContent(t *testing.T, b Backend) {
	ref := mustPut(t, b, uniqueBody("cancel"), "text/plain")
	wantAll(t, b, cancelledCtx(t), contentCalls(b.Content, ref), context.Canceled)
}

func testClosedContent(t *testing.T, b Backend) {
	ref := mustPut(t, b, uniqueBody("closed"), "text/plain")
	closeBackend(t, b)
	wantAll(t, b, t.Context(), contentCalls(b.Content, ref), eventlog.ErrClosed)
}
