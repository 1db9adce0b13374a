package engine_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestEngineRefusesAGappedLog gives a worker a task whose log lost a record:
// genesis at seq 1, then a record at seq 3 (as a damaged message block
// leaves it: the server skips the message whose checksum fails). Before, the
// fold's error failed the segment as retryable, so the task went back to
// ready and every worker took it, failed and handed it back again, up to the
// dispatcher's attempt cap (here 1000): a spin. Now the engine refuses at
// once, writes nothing on top of the hole (not even its LeaseGranted),
// counts it (DamagedLogs) and fails the task for good with a reason that
// starts damaged_log and names the missing seq.
func TestEngineRefusesAGappedLog(t *testing.T) {
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	prefix := fmt.Sprintf("gap%d", prefixes.Add(1))
	disp, err := jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{
		Prefix: prefix, LeaseTTL: 2 * time.Second, ReclaimMax: 1000, MaxFailAttempts: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disp.Close() })
	log, err := jetstream.Open(t.Context(), nc, jetstream.Config{Prefix: prefix, Registry: disp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	b := backend{name: "jetstream", log: log, disp: disp, content: log, ttl: 2 * time.Second}
	h := newHarness(t, b, "agents:\n  worker: {tools: [echo]}\n")
	id := h.submit(`
agent: worker
goal: say hello
script:
  - tool_calls: [{tool: echo, args: {text: hello}}]
  - finish: {answer: done}
`)
	// Seq 3, where seq 2 should be.
	env, err := eventlog.NewEnvelope(id, eventlog.OriginEngine, "lost-writer", noeta.TurnStarted{Turn: 1})
	if err != nil {
		t.Fatal(err)
	}
	env.ID, env.Seq, env.Time, env.LeaseGen, env.CorrelationID = noeta.NewID(), 3, time.Now(), 1, id
	body, err := jetstream.CloudEvent(env)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(fmt.Sprintf("%s.t.%d.%s.log", prefix, jetstream.Partition(id), id))
	msg.Data = body
	msg.Header.Set("Noeta-Type", env.Type)
	msg.Header.Set("Noeta-Seq", strconv.FormatUint(env.Seq, 10))
	msg.Header.Set("Noeta-Lease", "L-lost")
	msg.Header.Set("Noeta-Lease-Gen", "1")
	// Published through JetStream and acknowledged: a core publish and a
	// flush only say the server read the message, not that the stream
	// stored it, and the read below sometimes came first.
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	if _, err := log.Read(t.Context(), id, 0); !errors.Is(err, eventlog.ErrGap) {
		t.Fatalf("the log after the raw publish: %v, want a gap", err)
	}

	h.start(2)
	h.waitReleased(id, eventlog.DispatchTerminal)
	ds, err := disp.Inspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ds.Reason, engine.ReasonDamagedLog+":") || !strings.Contains(ds.Reason, "missing seq 2") || !strings.Contains(ds.Reason, id) {
		t.Errorf("dispatcher reason %q, want damaged_log naming the task and seq 2", ds.Reason)
	}
	if ds.FailAttempts > 1 {
		t.Errorf("the task was tried %d times; a damaged log must be refused once", ds.FailAttempts)
	}
	if got := h.eng.DamagedLogs(); got != 1 {
		t.Errorf("DamagedLogs = %d, want 1", got)
	}
	// Nothing was written: the stream holds the two records it had.
	info, err := log.Tasks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range info {
		if s.Task == id && s.LastSeq != 3 {
			t.Errorf("the log's last seq is %d, want 3: the engine wrote on top of the gap", s.LastSeq)
		}
	}
	// The worker reports its segment after the dispatcher has the failure.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		segs := append([]segmentResult(nil), h.segments...)
		h.mu.Unlock()
		if len(segs) > 0 || time.Now().After(deadline) {
			if len(segs) != 1 || !engine.DamagedLog(segs[0].err) {
				t.Errorf("segments %+v, want one, failed on the damaged log", segs)
			}
			break
		}
	}
}
