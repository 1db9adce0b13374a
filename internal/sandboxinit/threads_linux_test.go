package sandboxinit

import (
	"os"
	"testing"
)

// TestReserveThreads: the runtime holds at least the reserved threads at
// once after the reservation, however busy the machine is, since each
// was locked by a goroutine while the others were. The largest first:
// threads the process already has count toward the smaller ones.
func TestReserveThreads(t *testing.T) {
	for _, n := range []int{24, 8, 1} {
		reserveThreads(n)
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		// n locked at once, and the test's goroutine on a thread besides.
		if len(tasks) < n+1 {
			t.Errorf("reserveThreads(%d): the process has %d threads", n, len(tasks))
		}
	}
}
