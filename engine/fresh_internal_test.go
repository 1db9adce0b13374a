package engine

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/noeta-go/noeta/eventlog"
)

func genesisOf(task string, payload int) eventlog.Envelope {
	return eventlog.Envelope{Task: task, Seq: 1, Payload: bytes.Repeat([]byte("x"), payload)}
}

// aLog is a log's identity for FreshTasks, which compares logs and calls
// none of their methods.
type aLog struct {
	Log
	name string
}

// unequalLog is a log whose value == cannot compare.
type unequalLog struct {
	Log
	parts []string
}

// TestFreshTasksBounds: what FreshTasks keeps, hands out and forgets.
func TestFreshTasksBounds(t *testing.T) {
	mine, theirs := &aLog{name: "mine"}, &aLog{name: "theirs"}
	first := eventlog.Lease{Task: "T", Generation: 1}
	cases := []struct {
		name       string
		put        eventlog.Envelope
		putTo, log Log
		lease      eventlog.Lease
		want       bool
	}{
		{"the first lease takes it", genesisOf("T", 10), mine, mine, first, true},
		{"a later lease does not", genesisOf("T", 10), mine, mine, eventlog.Lease{Task: "T", Generation: 2}, false},
		{"another task's lease does not", genesisOf("U", 10), mine, mine, first, false},
		{"a lease on another log does not", genesisOf("T", 10), theirs, mine, first, false},
		{"a log that cannot be compared never matches", genesisOf("T", 10), unequalLog{}, unequalLog{}, first, false},
		{"a genesis too large is not kept", genesisOf("T", freshMaxPayload+1), mine, mine, first, false},
		{"a record not the genesis is not kept", eventlog.Envelope{Task: "T", Seq: 2}, mine, mine, first, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f FreshTasks
			f.put(c.putTo, c.put)
			if _, ok := f.take(c.log, c.lease); ok != c.want {
				t.Errorf("take: %v, want %v", ok, c.want)
			}
			// Taken or refused, it is forgotten.
			if _, ok := f.take(c.putTo, eventlog.Lease{Task: c.lease.Task, Generation: 1}); ok {
				t.Error("taken twice")
			}
		})
	}
	log := &aLog{}

	t.Run("the oldest falls out past the bound", func(t *testing.T) {
		var f FreshTasks
		for i := range freshMax + 10 {
			f.put(log, genesisOf(strconv.Itoa(i), 1))
		}
		if len(f.envs) != freshMax {
			t.Errorf("kept %d, want %d", len(f.envs), freshMax)
		}
		if _, ok := f.take(log, eventlog.Lease{Task: "0", Generation: 1}); ok {
			t.Error("the oldest was kept")
		}
		if _, ok := f.take(log, eventlog.Lease{Task: strconv.Itoa(freshMax + 9), Generation: 1}); !ok {
			t.Error("the newest was not kept")
		}
	})

	t.Run("taking keeps the names bounded", func(t *testing.T) {
		var f FreshTasks
		for i := range 10 * freshMax {
			task := strconv.Itoa(i)
			f.put(log, genesisOf(task, 1))
			f.take(log, eventlog.Lease{Task: task, Generation: 1})
		}
		if len(f.envs) != 0 || len(f.order) > 2*freshMax {
			t.Errorf("kept %d tasks and %d names", len(f.envs), len(f.order))
		}
	})
}
