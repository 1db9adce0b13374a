package noeta

import (
	"fmt"
	"strings"
	"testing"
)

// canonicalUnsorted is canonicalSample as a typical producer would write it:
// struct field order, HTML-escaped, one non-ASCII character raw.
const canonicalUnsorted = `{"id":"01HZX3J7K9Q2W5E8R1T4Y6U0P3","kind":"order.created","seq":12345,"ts":1717171717123,"actor":"user:42","data":{"sku":"A-1","amount":1999,"currency":"EUR","note":"café \u003cb\u003e"}}`

// canonicalNested returns an unsorted payload of about 1 KiB with nested
// objects and arrays of objects.
func canonicalNested() string {
	var b strings.Builder
	b.WriteString(`{"type":"batch","version":2,"items":[`)
	for i := range 5 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%04d","qty":%d,"price":%d.5,"attrs":{"size":"M","color":"blue","tags":["a","b"]},"name":"item %d"}`, i, i+1, 10+i, i)
	}
	b.WriteString(`],"meta":{"source":"web","region":"eu-west-1","trace":{"span":"abc123","parent":"def456"}},"at":1717171717123}`)
	return b.String()
}

func BenchmarkCanonicalizeJSON(b *testing.B) {
	for _, bc := range []struct {
		name, in string
	}{
		{"canonical-200B", canonicalSample},
		{"unsorted-200B", canonicalUnsorted},
		{"nested-1KiB", canonicalNested()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := []byte(bc.in)
			if _, err := CanonicalizeJSON(in); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := CanonicalizeJSON(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAppendCanonicalJSON(b *testing.B) {
	for _, bc := range []struct {
		name, in string
	}{
		{"canonical-200B", canonicalSample},
		{"unsorted-200B", canonicalUnsorted},
		{"nested-1KiB", canonicalNested()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			in := []byte(bc.in)
			buf := make([]byte, 0, 2*len(in))
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = AppendCanonicalJSON(buf[:0], in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkIsCanonicalJSON(b *testing.B) {
	in := []byte(canonicalSample)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if !IsCanonicalJSON(in) {
			b.Fatal("not canonical")
		}
	}
}
