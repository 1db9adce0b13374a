package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDoublesToTheBound(t *testing.T) {
	tests := []struct {
		name       string
		first, max time.Duration
		want       []time.Duration
	}{
		{"doubling", 10 * time.Millisecond, 50 * time.Millisecond, []time.Duration{10, 20, 40, 50, 50}},
		{"constant", 100 * time.Millisecond, 0, []time.Duration{100, 100, 100}},
		{"bound equals first", 5 * time.Millisecond, 5 * time.Millisecond, []time.Duration{5, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(tt.first, tt.max)
			for i, w := range tt.want {
				if got := p.Take(); got != w*time.Millisecond {
					t.Fatalf("wait %d: %v, want %v", i, got, w*time.Millisecond)
				}
			}
		})
	}
}

func TestJitterStaysWithinHalfAndWhole(t *testing.T) {
	p := New(80*time.Millisecond, 80*time.Millisecond).Jittered()
	for range 1000 {
		if d := p.Take(); d < 40*time.Millisecond || d > 80*time.Millisecond {
			t.Fatalf("a jittered wait of %v, outside [40ms, 80ms]", d)
		}
	}
}

func TestWaitEndsWithTheContext(t *testing.T) {
	cause := errors.New("stopped")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := New(time.Hour, time.Hour).Wait(ctx); !errors.Is(err, cause) {
		t.Fatalf("Wait on an ended context: %v, want %v", err, cause)
	}
	if err := New(time.Millisecond, time.Millisecond).Wait(context.Background()); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

func TestReset(t *testing.T) {
	p := New(time.Millisecond, time.Second)
	p.Take()
	p.Take()
	p.Reset(time.Millisecond)
	if p.Next() != time.Millisecond {
		t.Fatalf("after Reset the next pause is %v", p.Next())
	}
}
