package eventlog_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// TestFromTyped: only an envelope whose payload is still exactly what
// NewEnvelope produced from a typed value is vouched for; every way of
// changing it afterwards, and every envelope built by hand, loses that, and
// PrepareRecord's output (what backends store and hand out) never has it.
func TestFromTyped(t *testing.T) {
	t.Parallel()
	typed := func() eventlog.Envelope {
		env, err := eventlog.NewEnvelope("t1", eventlog.OriginEngine, "a", noeta.TurnStarted{Turn: 3})
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	tests := []struct {
		name string
		env  func() eventlog.Envelope
		want bool
	}{
		{"as built", typed, true},
		{"copied", func() eventlog.Envelope { e := typed(); c := e; return c }, true},
		{"payload replaced", func() eventlog.Envelope { e := typed(); e.Payload = json.RawMessage(`{"turn":-1}`); return e }, false},
		{"payload edited in place", func() eventlog.Envelope { e := typed(); e.Payload[len(e.Payload)-2] = '4'; return e }, false},
		{"payload cut", func() eventlog.Envelope { e := typed(); e.Payload = e.Payload[:len(e.Payload)-1]; return e }, false},
		{"type changed", func() eventlog.Envelope { e := typed(); e.Type = noeta.TypeToolCallStarted; return e }, false},
		{"built by hand, same bytes", func() eventlog.Envelope {
			e := typed()
			return eventlog.Envelope{Task: e.Task, Type: e.Type, Origin: e.Origin, Actor: e.Actor, Payload: e.Payload}
		}, false},
		{"after PrepareRecord", func() eventlog.Envelope {
			e, err := eventlog.PrepareRecord("t1", typed())
			if err != nil {
				t.Fatal(err)
			}
			return e
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := eventlog.FromTyped(tt.env()); got != tt.want {
				t.Fatalf("FromTyped = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPrepareRecordChecksWhatIsNoLongerTyped: PrepareRecord trusts a typed
// payload to be canonical only while it is as NewEnvelope built it; once
// edited, it is canonicalized, and refused when it is not a JSON object.
func TestPrepareRecordChecksWhatIsNoLongerTyped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload string // written over the typed payload: in place when it fits, else replaced
		want    string // the stored payload; "" for a refusal
	}{
		{"reordered", `{"z":1,"a":2}`, `{"a":2,"z":1}`},
		{"spaced", `{ "turn" : 4 }`, `{"turn":4}`},
		{"an array", `[1,2]`, ""},
		{"not JSON", `{"turn":`, ""},
		{"longer", `{"turn":4, "x":"` + strings.Repeat("a", 300) + `"}`, `{"turn":4,"x":"` + strings.Repeat("a", 300) + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := eventlog.NewEnvelope("t1", eventlog.OriginEngine, "a", noeta.TurnStarted{Turn: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(tt.payload) <= cap(env.Payload) {
				env.Payload = append(env.Payload[:0], tt.payload...)
			} else {
				env.Payload = json.RawMessage(tt.payload)
			}
			got, err := eventlog.PrepareRecord("t1", env)
			switch {
			case tt.want == "" && err == nil:
				t.Fatalf("stored %s, want a refusal", got.Payload)
			case tt.want != "" && err != nil:
				t.Fatal(err)
			case tt.want != "" && string(got.Payload) != tt.want:
				t.Fatalf("stored %s, want %s", got.Payload, tt.want)
			}
		})
	}
}
