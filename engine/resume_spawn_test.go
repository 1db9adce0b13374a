package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestResumedSpawnResignalsReadyChild reproduces a spawn cut short after it
// created a child (log and dispatcher row, ready) but before the child's
// ready signal was published: the process died in between. The resumed
// spawn found the child's log, saw the dispatcher knew the child and did
// nothing more, so the child was never leased and the parent waited on it
// forever. It now repairs the child's signal. The dispatcher here runs no
// reconciler, so only the spawn path can.
func TestResumedSpawnResignalsReadyChild(t *testing.T) {
	t.Parallel()
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	prefix := fmt.Sprintf("e%d", prefixes.Add(1))
	disp, err := jetstream.OpenDispatcher(t.Context(), nc, jetstream.DispatcherConfig{
		Prefix: prefix, LeaseTTL: 2 * time.Second, SweepInterval: -1,
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
	h := newHarness(t, backend{name: "jetstream", log: log, disp: disp, content: log, ttl: 2 * time.Second}, pathsConfig)
	ctx := t.Context()

	childScript := json.RawMessage(`[{"finish":{"answer":"from the child"}}]`)
	parentScript := fmt.Sprintf(`[{"spawn":[{"agent":"helper","goal":"a","script":%s}]},{"finish":{"answer":"done"}}]`, childScript)
	parent, err := h.eng.Submit(ctx, engine.Submission{Agent: "boss", Goal: "g", Script: json.RawMessage(parentScript)})
	if err != nil {
		t.Fatal(err)
	}
	// The child as the cut-short spawn left it: created and ready, its
	// signal never published.
	child := engine.ChildIDs(parent, 1, 1)[0]
	canon, err := noeta.CanonicalizeJSON(childScript)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := log.Put(ctx, canon, eventlog.MediaTypeJSON)
	if err != nil {
		t.Fatal(err)
	}
	env, err := eventlog.NewEnvelope(child, eventlog.OriginEngine, "engine-test", noeta.TaskCreated{
		TaskID: child, Agent: "helper", Goal: "a", ParentTaskID: parent, RootTaskID: parent, SubtaskDepth: 1, ScriptRef: &ref,
	})
	if err != nil {
		t.Fatal(err)
	}
	env.CorrelationID = parent
	if _, err := log.Create(ctx, env); err != nil {
		t.Fatal(err)
	}
	if err := disp.Enqueue(ctx, child, eventlog.EnqueueOptions{Parent: parent}); err != nil {
		t.Fatal(err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, strings.ToUpper(prefix)+"_READY")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, natsjs.WithPurgeSubject(prefix+".ready.*.*."+child)); err != nil {
		t.Fatal(err)
	}

	h.start(2)
	st := h.waitStatus(parent, noeta.StatusTerminal)
	if string(st.Answer) != `"done"` {
		t.Errorf("parent ended with %s, want \"done\"", st.Answer)
	}
	if got := payload[noeta.SubtaskSpawned](t, h.log(parent), noeta.TypeSubtaskSpawned).SubtaskID; got != child {
		t.Fatalf("the spawn created %s, not the child made beforehand (%s): the test did not resume a spawn", got, child)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if cst, err := h.eng.Inspect(cctx, child); err != nil || string(cst.Answer) != `"from the child"` {
		t.Errorf("child: %+v %v", cst, err)
	}
}
