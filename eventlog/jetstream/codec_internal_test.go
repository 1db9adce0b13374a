package jetstream

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog"
)

// TestCloudEventBodyMatchesSDK: the direct writer produces, byte for byte,
// the body the CloudEvents SDK produces for every envelope it accepts, and
// declines every envelope whose strings would need escaping or URL
// normalisation (which then goes through the SDK). A stored body that
// differed by writer would make CloudEvent disagree with the stream and a
// record's bytes depend on which path wrote it.
func TestCloudEventBodyMatchesSDK(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 19, 30, 0, 123456789, time.UTC)
	base := eventlog.Envelope{
		ID: "01JF0000000000000000000000", Task: "task-1", Seq: 7, Type: "ToolCallStarted",
		Time: at, Actor: "engine@host-1:4242", Origin: eventlog.OriginEngine,
		CorrelationID: "root-1", LeaseGen: 3,
		Payload: json.RawMessage(`{"args":{"url":"https://x/?a=1&b=<2>"},"call_id":"c","tool":"t","turn":1}`),
	}
	tests := []struct {
		name string
		edit func(*eventlog.Envelope)
		fast bool // the direct writer takes it
	}{
		{"engine append", func(*eventlog.Envelope) {}, true},
		{"genesis", func(e *eventlog.Envelope) { e.Seq, e.LeaseGen, e.Type = 1, 0, "TaskCreated" }, true},
		{"inbox record", func(e *eventlog.Envelope) { e.Seq, e.Key, e.LeaseGen = 0, "wake-k_1", 0 }, true},
		{"all optional", func(e *eventlog.Envelope) {
			e.CausationID, e.TraceParent = "01JF0000000000000000000001", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		}, true},
		{"local time", func(e *eventlog.Envelope) { e.Time = at.In(time.FixedZone("x", 3600)) }, true},
		{"whole second", func(e *eventlog.Envelope) { e.Time = at.Truncate(time.Second) }, true},
		{"unknown type", func(e *eventlog.Envelope) { e.Type = "SomethingNew2" }, true},
		{"html in strings", func(e *eventlog.Envelope) { e.CausationID = "a<b>&c" }, true},
		{"actor with slash", func(e *eventlog.Envelope) { e.Actor = "svc/worker 1" }, false},
		{"actor with percent", func(e *eventlog.Envelope) { e.Actor = "a%2Fb" }, false},
		{"actor non-ascii", func(e *eventlog.Envelope) { e.Actor = "ingénieur" }, false},
		{"actor dot", func(e *eventlog.Envelope) { e.Actor = ".." }, false},
		{"quote in causation", func(e *eventlog.Envelope) { e.CausationID = `a"b` }, false},
		{"backslash in trace", func(e *eventlog.Envelope) { e.TraceParent = `a\b` }, false},
		{"control char", func(e *eventlog.Envelope) { e.CorrelationID = "a\nb" }, false},
		{"padded task", func(e *eventlog.Envelope) { e.Task = " t " }, false},
		{"zero time", func(e *eventlog.Envelope) { e.Time = time.Time{} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := base
			tt.edit(&env)
			fast, ok := appendCloudEventFast(nil, env)
			if ok != tt.fast {
				t.Fatalf("direct writer took it: %v, want %v", ok, tt.fast)
			}
			sdk, err := cloudEventBodySDK(env)
			if err != nil {
				if ok {
					t.Fatalf("the SDK refuses what the direct writer wrote: %v", err)
				}
				return
			}
			if ok && !bytes.Equal(fast, sdk) {
				t.Fatalf("bodies differ\n fast: %s\n  sdk: %s", fast, sdk)
			}
			got, err := cloudEventBody(env)
			if err != nil || !bytes.Equal(got, sdk) {
				t.Fatalf("cloudEventBody = %s, %v; want the SDK's %s", got, err, sdk)
			}
		})
	}
}

// TestCloudEventBodyMatchesSDKRandom: random ASCII strings in every field:
// whenever the direct writer takes an envelope, its bytes are the SDK's.
func TestCloudEventBodyMatchesSDKRandom(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(17, 37))
	str := func(n int) string {
		b := make([]byte, rng.IntN(n+1))
		for i := range b {
			b[i] = byte(0x20 + rng.IntN(0x5f))
		}
		return string(b)
	}
	taken := 0
	for range 20000 {
		env := eventlog.Envelope{
			ID: "01JF" + str(4), Task: "t" + str(3), Seq: rng.Uint64N(3), Key: str(2), Type: "ToolCallStarted",
			Time: time.Unix(rng.Int64N(1<<32), rng.Int64N(1e9)), Actor: str(4), Origin: eventlog.OriginTool,
			CausationID: str(3), CorrelationID: str(3), TraceParent: str(2), LeaseGen: rng.Uint64N(3),
			Payload: json.RawMessage(`{"a":1}`),
		}
		fast, ok := appendCloudEventFast(nil, env)
		if !ok {
			continue
		}
		taken++
		sdk, err := cloudEventBodySDK(env)
		if err != nil {
			t.Fatalf("%+v: the SDK refuses what the direct writer wrote: %v", env, err)
		}
		if !bytes.Equal(fast, sdk) {
			t.Fatalf("bodies differ for %+v\n fast: %s\n  sdk: %s", env, fast, sdk)
		}
	}
	if taken < 100 {
		t.Fatalf("only %d random envelopes took the direct path; the test checks too little", taken)
	}
}
