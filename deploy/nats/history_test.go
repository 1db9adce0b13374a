package nats_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/noeta-go/noeta/eventlog"
)

// The history of a run, recorded from outside the engine: each client
// operation on a task's log with when it was invoked, when it returned and
// what it returned. A task's log is a single-writer append-only sequence;
// the client sees it through two operations:
//
//   - submit: creates the task (its TaskCreated at seq 1). Acknowledged, the
//     log is never empty again; failed (a timeout, a partition), it may or
//     may not have happened, which constrains nothing.
//   - read: returns the whole log, each record as seq, id, lease generation
//     and type. Whatever the serves append in between, a read linearized
//     after another returns an extension of it: a record once read is never
//     missing later, and no seq ever holds two different records.
//
// porcupine searches for a linearization of every task's operations
// against that model (ADR 0060 says why porcupine).

type histOp string

const (
	opSubmit histOp = "submit"
	opRead   histOp = "read"
)

type histInput struct{ op histOp }

type histOutput struct {
	ok  bool
	log string // read: the records' digests, one a line
}

type histState struct {
	created bool
	log     string
}

// digest is one record as a read reports it: enough to tell two records at
// one seq apart.
func digest(env eventlog.Envelope) string {
	return fmt.Sprintf("%d %s g%d %s\n", env.Seq, env.ID, env.LeaseGen, env.Type)
}

var logModel = porcupine.Model{
	Init: func() any { return histState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(histState), input.(histInput), output.(histOutput)
		switch in.op {
		case opSubmit:
			if !out.ok {
				return true, st
			}
			return true, histState{created: true, log: st.log}
		case opRead:
			if !out.ok {
				return true, st
			}
			if !strings.HasPrefix(out.log, st.log) || st.created && out.log == "" {
				return false, st
			}
			return true, histState{created: st.created || out.log != "", log: out.log}
		}
		return false, st
	},
	Equal: func(a, b any) bool { return a.(histState) == b.(histState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(histInput), output.(histOutput)
		if !out.ok {
			return string(in.op) + " → unknown"
		}
		if in.op == opRead {
			return fmt.Sprintf("read → %d records", strings.Count(out.log, "\n"))
		}
		return string(in.op) + " → ok"
	},
	DescribeState: func(state any) string {
		st := state.(histState)
		return fmt.Sprintf("%d records", strings.Count(st.log, "\n"))
	},
}

// history records the operations of a run, per task.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   map[string][]porcupine.Operation
}

func newHistory() *history {
	return &history{start: time.Now(), ops: map[string][]porcupine.Operation{}}
}

// unknownReturn is the return time of an operation whose outcome is
// unknown: it may take effect at any time after its call.
const unknownReturn = int64(1) << 62

// add records one operation; an operation that failed returns "never" (its
// effect, if any, may land at any later point).
func (h *history) add(task string, client int, op histOp, call, ret time.Time, out histOutput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := ret.Sub(h.start).Nanoseconds()
	if !out.ok {
		r = unknownReturn
	}
	h.ops[task] = append(h.ops[task], porcupine.Operation{ClientId: client, Input: histInput{op}, Output: out,
		Call: call.Sub(h.start).Nanoseconds(), Return: r})
}

// read records a read's result: envs, or a failed read.
func (h *history) read(task string, client int, call, ret time.Time, envs []eventlog.Envelope, err error) {
	var b strings.Builder
	for _, env := range envs {
		b.WriteString(digest(env))
	}
	h.add(task, client, opRead, call, ret, histOutput{ok: err == nil, log: b.String()})
}

// count returns how many operations were recorded.
func (h *history) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ops := range h.ops {
		n += len(ops)
	}
	return n
}

// check runs the checker over every task's operations and returns the
// tasks whose history is not linearizable (a visualization of each is
// written to dir) and those the checker gave up on within timeout.
func (h *history) check(dir string, timeout time.Duration) (illegal, unknown []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for task, ops := range h.ops {
		res, info := porcupine.CheckOperationsVerbose(logModel, ops, timeout)
		switch res {
		case porcupine.Illegal:
			illegal = append(illegal, task)
			if dir != "" {
				_ = os.MkdirAll(dir, 0o755)
				_ = porcupine.VisualizePath(logModel, info, filepath.Join(dir, task+".html"))
			}
		case porcupine.Unknown:
			unknown = append(unknown, task)
		}
	}
	return illegal, unknown
}

// checkSingleWriter checks a task's log for what only a stale writer
// leaves: a record written under an older lease generation after one
// written under a newer, which is a fenced write the log accepted. (The
// records' Actor names a role as often as a process, tool_runtime for a
// tool's result, so it cannot tell two writers of one generation apart.)
func checkSingleWriter(envs []eventlog.Envelope) error {
	var gen uint64
	for _, env := range envs {
		if env.LeaseGen == 0 {
			continue // TaskCreated and records written outside a lease
		}
		if env.LeaseGen < gen {
			return fmt.Errorf("seq %d (%s) written under lease generation %d after generation %d: a stale lease holder's write was accepted",
				env.Seq, env.Type, env.LeaseGen, gen)
		}
		gen = env.LeaseGen
	}
	return nil
}

// TestLogModel: the checker finds what it is there to find (a record read
// once and missing later, two records at one seq, a created task read
// empty) and passes what is legal (concurrent reads of a growing log, a
// failed submit, a read concurrent with a submit that sees nothing yet).
func TestLogModel(t *testing.T) {
	const a, b, c = "1 A g0 TaskCreated\n", "2 B g1 TurnStarted\n", "2 C g2 TurnStarted\n"
	sub := func(call, ret int64, ok bool) porcupine.Operation {
		if !ok {
			ret = unknownReturn
		}
		return porcupine.Operation{Input: histInput{opSubmit}, Output: histOutput{ok: ok}, Call: call, Return: ret}
	}
	read := func(call, ret int64, log string) porcupine.Operation {
		return porcupine.Operation{ClientId: 1, Input: histInput{opRead}, Output: histOutput{ok: true, log: log}, Call: call, Return: ret}
	}
	tests := []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"growing log", []porcupine.Operation{sub(0, 1, true), read(2, 3, a), read(4, 5, a+b)}, true},
		{"concurrent reads either order", []porcupine.Operation{sub(0, 1, true), read(2, 6, a+b), read(3, 5, a)}, true},
		{"read during the submit sees nothing", []porcupine.Operation{sub(0, 5, true), read(1, 2, ""), read(6, 7, a)}, true},
		{"failed submit that happened", []porcupine.Operation{sub(0, 1, false), read(2, 3, a)}, true},
		{"failed submit that did not", []porcupine.Operation{sub(0, 1, false), read(2, 3, "")}, true},
		{"record lost", []porcupine.Operation{sub(0, 1, true), read(2, 3, a+b), read(4, 5, a)}, false},
		{"two records at one seq", []porcupine.Operation{sub(0, 1, true), read(2, 3, a+b), read(4, 5, a+c)}, false},
		{"acknowledged submit read empty", []porcupine.Operation{sub(0, 1, true), read(2, 3, "")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(logModel, tt.ops); got != tt.want {
				t.Errorf("linearizable = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCheckSingleWriter: a record under an older generation after a newer
// one is what a fenced write getting through looks like.
func TestCheckSingleWriter(t *testing.T) {
	rec := func(seq, gen uint64, actor string) eventlog.Envelope {
		return eventlog.Envelope{Seq: seq, LeaseGen: gen, Actor: actor, Type: "X"}
	}
	tests := []struct {
		name string
		envs []eventlog.Envelope
		ok   bool
	}{
		{"one writer after another", []eventlog.Envelope{rec(1, 0, "c"), rec(2, 1, "a"), rec(3, 1, "a"), rec(4, 3, "b")}, true},
		{"stale generation after a newer", []eventlog.Envelope{rec(1, 0, "c"), rec(2, 2, "a"), rec(3, 1, "b")}, false},
		{"stale generation after several", []eventlog.Envelope{rec(1, 0, "c"), rec(2, 1, "a"), rec(3, 4, "b"), rec(4, 4, "b"), rec(5, 3, "a")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkSingleWriter(tt.envs); (err == nil) != tt.ok {
				t.Errorf("checkSingleWriter = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
