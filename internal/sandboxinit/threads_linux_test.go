package sandboxinit

import (
	"os"
	"testing"
)

// TestReserveThreads: the runtime holds at least the reserved threads at
// once after the reservation, however busy the machine is, since each
// was locked by a goroutine while the others were.
func TestReserveThreads(t *testing.T) {
	for _, n := range []int{1, 8, 24} {
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
