package jshost

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBadOptions: options that cannot work are refused before anything
// starts, naming the option.
func TestBadOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{ReadOnly: true, Runs: true}, "read-only host runs no workers"},
		{Options{Replicas: 3}, "needs a cluster"},
		{Options{Replicas: 6, NATS: Connection{URL: "nats://127.0.0.1:1"}}, "replicas is 6"},
		{Options{NATS: Connection{URL: "nats://127.0.0.1:1"}, DataDir: "x"}, "data directory is for the embedded server"},
		{Options{Prefix: "a.b"}, "prefix"},
		{Options{LeaseTTL: 1500 * time.Millisecond}, "whole seconds"},
		{Options{NATS: Connection{URL: "nats://127.0.0.1:1", Password: "x"}}, "--password needs --user"},
	} {
		_, err := Open(t.Context(), c.o)
		if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want ErrBadOptions with %q", c.o, err, c.want)
		}
	}
}
