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
