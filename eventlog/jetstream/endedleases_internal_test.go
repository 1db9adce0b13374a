package jetstream

import (
	"fmt"
	"testing"
	"time"
)

// TestEndedLeasesBounded: a remembered key is taken once; the record holds
// at most two generations of max keys, so a flood of releases cannot grow
// it, and a key pushed out by the flood is simply not remembered (its
// expiry marker then costs the watcher a row read, nothing worse).
func TestEndedLeasesBounded(t *testing.T) {
	t.Parallel()
	e := newEndedLeases(time.Hour, 100)
	e.add("t1.l1")
	if !e.take("t1.l1") || e.take("t1.l1") {
		t.Fatal("a remembered key is taken exactly once")
	}
	if e.take("t2.l2") {
		t.Fatal("a key never added was taken")
	}
	for i := range 1000 {
		e.add(fmt.Sprintf("t%d.l", i))
	}
	if n := len(e.cur) + len(e.prev); n > 200 {
		t.Fatalf("%d keys held, want at most two generations of 100", n)
	}
	if !e.take("t999.l") || e.take("t0.l") {
		t.Error("the newest key must be remembered, the oldest pushed out")
	}
}
