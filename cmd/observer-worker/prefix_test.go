package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestPrefixIsAUsageError: a prefix that is not a NATS token is bad usage.
//
// Reproduction (before): `observer-worker --nats URL --prefix '*'` connected,
// then failed to open the stream and exited 1, as if the deployment were
// down.
func TestPrefixIsAUsageError(t *testing.T) {
	for _, prefix := range []string{"*", ">", "a.b", "", "a b", strings.Repeat("p", 33)} {
		var out, errb bytes.Buffer
		args := []string{"--nats", "nats://127.0.0.1:1", "--prefix", prefix}
		if code := run(context.Background(), args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "--prefix") {
			t.Errorf("--prefix %q: exit %d, stderr %q; want 2 naming --prefix", prefix, code, errb.String())
		}
	}
}

// TestGCPercent: the worker collects less often by default, and an
// operator's GOGC is left as the runtime applied it.
func TestGCPercent(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, c := range []struct {
		name   string
		env    map[string]string
		want   int
		wantOK bool
	}{
		{"unset", nil, defaultGCPercent, true},
		{"empty", map[string]string{"GOGC": ""}, defaultGCPercent, true},
		{"set", map[string]string{"GOGC": "100"}, 0, false},
		{"off", map[string]string{"GOGC": "off"}, 0, false},
	} {
		if got, ok := gcPercent(env(c.env)); got != c.want || ok != c.wantOK {
			t.Errorf("%s: gcPercent = %d, %v; want %d, %v", c.name, got, ok, c.want, c.wantOK)
		}
	}
}
