package jetstream

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// TestDecodePackRefusesBadPacks: a message that is not a pack as this
// package writes one — records out of order, of two tasks, of two lease
// generations, an inbox record, a baseline before the end, headers that
// disagree with the body, no records, more than MaxBatch — is a
// *CorruptRecordError for the whole message, never a partial read. A good
// pack decodes to its records in order.
func TestDecodePackRefusesBadPacks(t *testing.T) {
	t.Parallel()
	const subject = "noeta.t.1.task-1.log"
	at := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	rec := func(seq uint64, typ string) eventlog.Envelope {
		payload := `{"turn":1}`
		if typ == noeta.TypeTaskSnapshot {
			ref, _ := json.Marshal(noeta.RefFor([]byte("{}"), "application/json"))
			payload = `{"state_ref":` + string(ref) + `,"upto_seq":1}`
		}
		return eventlog.Envelope{ID: noeta.NewIDAt(at), Task: "task-1", Seq: seq, Type: typ, Time: at, Actor: "w",
			Origin: eventlog.OriginEngine, CorrelationID: "task-1", LeaseGen: 2, Payload: json.RawMessage(payload)}
	}
	three := func() []eventlog.Envelope {
		return []eventlog.Envelope{rec(5, noeta.TypeTurnStarted), rec(6, noeta.TypeTurnStarted), rec(7, noeta.TypeTurnStarted)}
	}
	build := func(envs []eventlog.Envelope) *nats.Msg {
		bodies := make([][]byte, len(envs))
		for i, e := range envs {
			b, err := cloudEventBody(e)
			if err != nil {
				t.Fatal(err)
			}
			bodies[i] = b
		}
		return encodePack(subject, envs, bodies, meta{leaseID: "l"})
	}
	good := build(three())
	rs, err := decodeMsg(subject, 9, good.Header, good.Data)
	if err != nil || len(rs) != 3 || rs[0].env.Seq != 5 || rs[2].env.Seq != 7 || rs[1].streamSeq != 9 {
		t.Fatalf("a good pack: %d records, %v", len(rs), err)
	}
	tests := []struct {
		name string
		msg  func() *nats.Msg
		want string
	}{
		{"seqs not consecutive", func() *nats.Msg { e := three(); e[2].Seq = 9; return build(e) }, "sequence 9, want 7"},
		{"two tasks", func() *nats.Msg { e := three(); e[1].Task = "task-2"; return build(e) }, "of task"},
		{"two generations", func() *nats.Msg { e := three(); e[1].LeaseGen = 3; return build(e) }, "lease generation"},
		{"an inbox record", func() *nats.Msg { e := three(); e[1].Key = "k"; return build(e) }, "inbox key"},
		{"no seq", func() *nats.Msg { e := three(); e[0].Seq = 0; return build(e) }, "no sequence"},
		{"a baseline before the end", func() *nats.Msg {
			e := three()
			e[1] = rec(6, noeta.TypeTaskSnapshot)
			return build(e)
		}, "baseline"},
		{"Noeta-Seq disagrees", func() *nats.Msg { m := build(three()); m.Header.Set(hdrSeq, "8"); return m }, "Noeta-Seq header 8"},
		{"Noeta-Count disagrees", func() *nats.Msg { m := build(three()); m.Header.Set(hdrCount, "2"); return m }, "Noeta-Count header 2"},
		{"Noeta-Type disagrees", func() *nats.Msg {
			m := build(three())
			m.Header[hdrType][2] = noeta.TypeTaskSnapshot
			return m
		}, `Noeta-Type header 2 is "TaskSnapshot"`},
		{"a Noeta-Type missing", func() *nats.Msg { m := build(three()); m.Header[hdrType] = m.Header[hdrType][:2]; return m }, "2 Noeta-Type headers for 3 records"},
		{"Noeta-Origin disagrees", func() *nats.Msg { m := build(three()); m.Header[hdrOrigin][0] = "human"; return m }, `Noeta-Origin header 0 is "human"`},
		{"one record's Noeta-Type disagrees", func() *nats.Msg {
			e := rec(5, noeta.TypeTurnStarted)
			b, err := cloudEventBody(e)
			if err != nil {
				t.Fatal(err)
			}
			m := encodeBody(subject, e, b, meta{leaseID: "l"})
			m.Header.Set(hdrType, noeta.TypeTaskSnapshot)
			return m
		}, `Noeta-Type header 0 is "TaskSnapshot"`},
		{"empty", func() *nats.Msg { m := build(three()); m.Data = []byte("[]"); return m }, "0 records"},
		{"too many", func() *nats.Msg {
			m := build(three())
			one := m.Data[1 : strings.Index(string(m.Data), `},{`)+1]
			m.Data = []byte("[" + strings.TrimSuffix(strings.Repeat(string(one)+",", eventlog.MaxBatch+1), ",") + "]")
			return m
		}, "101 records"},
		{"not an array of events", func() *nats.Msg { m := build(three()); m.Data = []byte(`[1,2]`); return m }, "not a CloudEvent"},
		{"truncated", func() *nats.Msg { m := build(three()); m.Data = m.Data[:len(m.Data)-10]; return m }, "not a JSON array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.msg()
			rs, err := decodeMsg(subject, 9, m.Header, m.Data)
			var ce *CorruptRecordError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || len(rs) != 0 {
				t.Fatalf("got %d records, %v; want a CorruptRecordError and none", len(rs), err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
			if ce.StreamSeq != 9 {
				t.Errorf("error names stream sequence %d, want 9", ce.StreamSeq)
			}
		})
	}
}

// TestPackBuiltOnceForItsTail: the pack fits built is the one the first
// write sends while the tail is the one it was built after; a tail that
// moved (another record, another lease) gets a pack built after it, and a
// pack is never sent twice.
func TestPackBuiltOnceForItsTail(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 5, 0, 0, 0, time.UTC)
	l := &Log{cfg: Config{Now: func() time.Time { return at }}, subj: subjects{"noeta"}}
	env := eventlog.Envelope{Task: "task-1", Type: noeta.TypeTurnStarted, Actor: "w", Origin: eventlog.OriginEngine,
		CorrelationID: "task-1", Payload: json.RawMessage(`{"turn":1}`)}
	lease := eventlog.Lease{Task: "task-1", ID: "l1", Generation: 2}
	op := func(seq uint64, leaseID string) *packOp {
		ts := &taskState{known: true, tail: tail{streamSeq: 10 + seq, seq: seq, leaseID: leaseID, gen: 2}}
		b := &packOp{appendOp: appendOp{l: l, ts: ts, lease: lease, env: env}, envs: []eventlog.Envelope{env, env}}
		p, err := b.pack(at)
		if err != nil {
			t.Fatal(err)
		}
		b.built = p
		return b
	}

	b := op(4, "l1")
	built := b.built
	p, err := b.next()
	if err != nil || p != built || p.recs[0].Seq != 5 || p.grant {
		t.Fatalf("unmoved tail: the built pack %v, first seq %d, grant %v, %v; want it, 5, false", p == built, p.recs[0].Seq, p.grant, err)
	}
	if again, err := b.next(); err != nil || again == built || again.recs[0].ID == built.recs[0].ID {
		t.Fatalf("a second write sent the same pack again (%v)", err)
	}

	b = op(4, "l1")
	built = b.built
	b.ts.tail.seq, b.ts.tail.streamSeq = 6, 16
	if p, err := b.next(); err != nil || p == built || p.recs[0].Seq != 7 {
		t.Fatalf("tail moved to 6: built pack reused %v, first seq %d, %v; want a new pack from 7", p == built, p.recs[0].Seq, err)
	}

	b = op(4, "l1")
	built = b.built
	b.ts.tail.leaseID = "l0"
	if p, err := b.next(); err != nil || p == built || !p.grant || p.recs[0].Type != noeta.TypeLeaseGranted {
		t.Fatalf("tail another lease's: built pack reused %v, grant %v, %v; want a new pack opening with the LeaseGranted", p == built, p.grant, err)
	}
}
