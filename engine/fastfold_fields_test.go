package engine

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// fill sets every field of v, recursively: strings to their JSON name (so
// records meant to meet, a call's start and its finish, an approval's
// request and its answer, share their ids), numbers, booleans, one element
// in every slice and map, a value behind every pointer.
func fill(v reflect.Value, name string, depth int) {
	if depth > 6 {
		return
	}
	if v.Type() == reflect.TypeFor[noeta.Verdict]() {
		// A verdict is an enum: any other number does not encode.
		v.SetUint(uint64(noeta.VerdictRequireApproval))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(name)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), name, depth+1)
		v.Set(p)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"` + name + `":"x"}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), name, depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, name, depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, name, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			fill(v.Field(i), jsonName(f), depth+1)
		}
	}
}

func jsonName(f reflect.StructField) string {
	if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n != "" {
		return n
	}
	return f.Name
}

// payloadVariants returns, for a record type, a payload with every field
// set and, for each field, one with only that field set.
func payloadVariants(t testing.TB, typ string) []noeta.Payload {
	t.Helper()
	p, ok := noeta.NewPayload(typ)
	if !ok {
		t.Fatalf("no payload for %s", typ)
	}
	rt := reflect.TypeOf(p).Elem()
	all := reflect.New(rt)
	fill(all.Elem(), typ, 0)
	out := []noeta.Payload{all.Interface().(noeta.Payload)}
	for i := range rt.NumField() {
		one := reflect.New(rt)
		for j := range rt.NumField() {
			// A verdict has no zero that encodes: the others are allow.
			if rt.Field(j).Type == reflect.TypeFor[noeta.Verdict]() {
				one.Elem().Field(j).SetUint(uint64(noeta.VerdictAllow))
			}
		}
		fill(one.Elem().Field(i), jsonName(rt.Field(i)), 1)
		out = append(out, one.Interface().(noeta.Payload))
	}
	return out
}

// TestFastReaderAgreesOnEveryField hands the fast reader every record type
// with every field set, and with each field set alone: what it reads must
// be what encoding/json decodes, field for field, or it must refuse the
// record (and the decoder reads it). For the hot records it must read, not
// refuse, each of their fields: a field the reader was not taught would
// send every such record to the slow decoder.
func TestFastReaderAgreesOnEveryField(t *testing.T) {
	// Fields the reader must read on its own when set alone (the rest of
	// PolicyDecided, rarer, goes to the decoder).
	mustRead := map[string][]string{
		noeta.TypeTurnStarted:      {"turn"},
		noeta.TypeToolCallStarted:  {"call_id", "tool", "args", "args_ref", "turn"},
		noeta.TypeToolCallFinished: {"call_id", "tool", "ok", "output", "output_ref", "error", "duration_ms", "cost_usd", "egress"},
		noeta.TypeToolCallDenied:   {"call_id", "tool", "guard", "reason"},
		noeta.TypeGuardShadowed:    {"action", "call_id", "tool", "agent", "guard", "rule", "verdict", "reason", "failed", "decided", "decided_by"},
		noeta.TypePolicyDecided:    {"turn", "decision", "cost_usd", "input_tokens", "output_tokens", "version", "tool_calls", "answer", "model", "provider", "latency_ms", "response_ref", "text", "text_ref"},
		noeta.TypeLeaseGranted:     {"lease_id", "generation", "worker"},
		noeta.TypeTaskSnapshot:     {"state_ref", "upto_seq"},
	}
	for _, typ := range noeta.EventTypes() {
		for i, p := range payloadVariants(t, typ) {
			b, err := noeta.Canonical(p)
			if err != nil {
				t.Fatalf("%s variant %d: %v", typ, i, err)
			}
			fp, ok := fastPayload(typ, b, nil)
			if !ok {
				if i > 0 {
					field := jsonName(reflect.TypeOf(p).Elem().Field(i - 1))
					if slices.Contains(mustRead[typ], field) {
						t.Errorf("%s with only %s set: the fast reader refused %s", typ, field, b)
					}
				}
				continue
			}
			if _, hot := mustRead[typ]; !hot {
				t.Errorf("%s: the fast reader read a type it does not know: %s", typ, b)
				continue
			}
			if typ == noeta.TypeLeaseGranted || typ == noeta.TypeTaskSnapshot {
				// Read for their type alone: the fold and the composer use
				// no field of either (the fold comparison below holds them
				// to it).
				continue
			}
			dp, _, err := (eventlog.Envelope{Type: typ, Payload: b}).Decode()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fp, dp) {
				t.Errorf("%s %s:\nfast    %+v\ndecoded %+v", typ, b, fp, dp)
			}
		}
	}
}

// TestFastReaderRefusesUnknownMembers adds a member no payload has to each
// hot record: the fast reader must refuse it (the decoder then reads the
// record, and the composed context and the fold see what it sees), never
// skip it.
func TestFastReaderRefusesUnknownMembers(t *testing.T) {
	for _, typ := range []string{noeta.TypeLeaseGranted, noeta.TypeTaskSnapshot, noeta.TypeTurnStarted,
		noeta.TypePolicyDecided, noeta.TypeToolCallStarted, noeta.TypeToolCallFinished, noeta.TypeToolCallDenied,
		noeta.TypeGuardShadowed} {
		for _, p := range payloadVariants(t, typ)[1:] {
			b, err := noeta.Canonical(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, extra := range []string{`"zz_new":1`, `"aa_new":{"x":[1]}`, `"Turn":2`} {
				var with []byte
				if extra[1] < b[2] {
					with = append([]byte("{"+extra+","), b[1:]...)
				} else {
					with = append(append(bytes.Clone(b[:len(b)-1]), ","+extra...), '}')
				}
				if _, ok := fastPayload(typ, with, nil); ok {
					t.Errorf("%s: the fast reader took %s", typ, with)
				}
			}
		}
	}
}

// TestFastFoldAgreesOnEveryField folds a log of every record type, each
// with every field set and with each field set alone (and the decisions
// and approvals in each of their kinds), with the fast reader and with the
// decoder alone: the states, composed context included, must be the same
// byte for byte.
func TestFastFoldAgreesOnEveryField(t *testing.T) {
	envs := everyFieldLog(t)
	fast, err := Fold(envs)
	if err != nil {
		t.Fatal(err)
	}
	fastFold = false
	full, err := Fold(envs)
	fastFold = true
	if err != nil {
		t.Fatal(err)
	}
	a, err := fast.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := full.Canonical()
	if !bytes.Equal(a, b) {
		t.Errorf("fast fold\n%s\ndecoded fold\n%s", a, b)
	}
	// Every prefix too: a snapshot is taken anywhere.
	for n := 1; n < len(envs); n += 7 {
		f1, err1 := Fold(envs[:n])
		fastFold = false
		f2, err2 := Fold(envs[:n])
		fastFold = true
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		a, _ := f1.Canonical()
		b, _ := f2.Canonical()
		if !bytes.Equal(a, b) {
			t.Fatalf("first %d records: fast fold\n%s\ndecoded fold\n%s", n, a, b)
		}
	}
}

// canonicalWhole is a state's canonical JSON as it was made before the
// context was set in apart: the whole state, the composer as its
// composerJSON, encoded at once.
func canonicalWhole(t testing.TB, s *State) []byte {
	t.Helper()
	var ctx any
	if c := s.Context; c != nil {
		ctx = composerJSON{MaxToolOutput: c.cfg.MaxToolOutput, Messages: c.msgs, Open: c.open, Asked: c.asked}
	}
	b, err := noeta.Canonical(struct {
		*State
		Context any `json:"context,omitempty"`
	}{s, ctx})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCanonicalSplicesTheContext takes a state's canonical JSON after every
// record of several logs, the composer's cache of encoded messages growing
// as it goes, and wants the bytes of encoding the whole state at once; a
// clone's context and a state restored from the bytes give them too.
func TestCanonicalSplicesTheContext(t *testing.T) {
	logs := map[string][]eventlog.Envelope{"synthetic": syntheticLog(t, 400), "every field": everyFieldLog(t)}
	for name, envs := range logs {
		s := &State{}
		for i, env := range envs {
			if err := s.Apply(env); err != nil {
				t.Fatal(err)
			}
			if name == "synthetic" && i%3 != 0 && i != len(envs)-1 {
				continue
			}
			got, err := s.Canonical()
			if err != nil {
				t.Fatal(err)
			}
			if want := canonicalWhole(t, s); !bytes.Equal(got, want) {
				t.Fatalf("%s, seq %d:\nspliced %s\nwhole   %s", name, env.Seq, got, want)
			}
			// (A clone's governance may differ in nil and empty lists;
			// its context may not.)
			c, _ := s.Clone().Context.canonical()
			if w, _ := s.Context.canonical(); !bytes.Equal(c, w) {
				t.Fatalf("%s, seq %d: clone's context\n%s\nstate's\n%s", name, env.Seq, c, w)
			}
			var back State
			if err := json.Unmarshal(got, &back); err != nil {
				t.Fatal(err)
			}
			if b, _ := back.Canonical(); !bytes.Equal(b, got) {
				t.Fatalf("%s, seq %d: restored\n%s\nstate\n%s", name, env.Seq, b, got)
			}
		}
	}
}

func TestWithMember(t *testing.T) {
	for _, c := range []struct{ obj, want string }{
		{`{}`, `{"c":1}`},
		{`{"a":0}`, `{"a":0,"c":1}`},
		{`{"d":0}`, `{"c":1,"d":0}`},
		{`{"a":[1,"}"],"b":{"c":2},"d":"x"}`, `{"a":[1,"}"],"b":{"c":2},"c":1,"d":"x"}`},
		{`{"a":0,"b":1}`, `{"a":0,"b":1,"c":1}`},
	} {
		got, ok := withMember([]byte(c.obj), "c", []byte("1"))
		if !ok || string(got) != c.want {
			t.Errorf("withMember(%s) = %s %v, want %s", c.obj, got, ok, c.want)
		}
	}
	for _, obj := range []string{`{"c":0}`, `{"\u00e9":0}`, `{"a\"":0}`, `[]`, `{"a":1`} {
		if _, ok := withMember([]byte(obj), "c", []byte("1")); ok {
			t.Errorf("withMember(%s) took it", obj)
		}
	}
}

// everyFieldLog is a log of every record type, each with every field set
// and with each field set alone, the decisions and approvals in each of
// their kinds.
func everyFieldLog(t testing.TB) []eventlog.Envelope {
	var envs []eventlog.Envelope
	add := func(p noeta.Payload) {
		t.Helper()
		env, err := eventlog.NewEnvelope("T", eventlog.OriginEngine, "x", p)
		if err != nil {
			t.Fatalf("%T: %v", p, err)
		}
		env.Seq, env.LeaseGen = uint64(len(envs)+1), uint64(len(envs)/10+1)
		env.Time = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(len(envs)) * time.Second)
		envs = append(envs, env)
	}
	created := payloadVariants(t, noeta.TypeTaskCreated)[0]
	add(created)
	kinds := []noeta.DecisionKind{noeta.DecisionToolCalls, noeta.DecisionSpawn, noeta.DecisionYieldForHuman,
		noeta.DecisionWaitTimer, noeta.DecisionWaitExternal, noeta.DecisionStatePatch, noeta.DecisionFinish, noeta.DecisionFail}
	actions := []noeta.ApprovalAction{noeta.ApprovalToolCall, noeta.ApprovalSpawnSubtask, noeta.ApprovalFinish}
	for _, typ := range noeta.EventTypes() {
		for _, p := range payloadVariants(t, typ) {
			switch p := p.(type) {
			case *noeta.TaskCreated:
				continue // one is enough: a second restarts the state
			case *noeta.TaskStatePatched:
				if len(p.Patch) == 0 {
					continue // not a patch
				}
			case *noeta.PolicyDecided:
				for _, k := range kinds {
					for _, v := range []int{0, 2} {
						q := *p
						q.Decision, q.Version = k, v
						add(noeta.TurnStarted{Turn: len(envs)})
						add(q)
						add(payloadVariants(t, noeta.TypeToolCallStarted)[0])
						add(payloadVariants(t, noeta.TypeToolCallFinished)[0])
					}
				}
				// A decision kept as the turn's, then another record of
				// the type in the same turn: the first must stay as it was.
				v2, v1 := *p, *p
				v2.Decision, v2.Version, v2.Spawn, v2.Notes = noeta.DecisionToolCalls, 2, nil, nil
				v1.Decision, v1.Version, v1.Turn, v1.CostUSD = noeta.DecisionFinish, 0, 99, 2.5
				add(noeta.TurnStarted{Turn: len(envs)})
				add(v2)
				add(v1)
				add(payloadVariants(t, noeta.TypeToolCallStarted)[0])
				continue
			case *noeta.ApprovalRequested:
				for _, a := range actions {
					q := *p
					q.Action, q.CallID = a, "call_id"
					add(q)
					for _, d := range []noeta.ApprovalDecision{noeta.ApprovalApprove, "deny"} {
						r := payloadVariants(t, noeta.TypeApprovalResolved)[0].(*noeta.ApprovalResolved)
						r.Handle, r.Decision = q.Handle, d
						c := payloadVariants(t, noeta.TypeApprovalCounted)[0].(*noeta.ApprovalCounted)
						c.Handle = q.Handle
						add(c)
						add(r)
						add(q)
					}
				}
			}
			add(p)
		}
	}
	var ts noeta.Payload = payloadVariants(t, noeta.TypeTaskCompleted)[0]
	add(ts)
	return envs
}
