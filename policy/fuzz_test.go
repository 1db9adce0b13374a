package policy

import (
	"context"
	"reflect"
	"testing"
)

// FuzzParseTaskFile feeds arbitrary bytes to the parser. It must never panic,
// and whatever it accepts must hold up: every turn decides a valid decision,
// and the script survives its JSON form unchanged, children included.
func FuzzParseTaskFile(f *testing.F) {
	for _, seed := range []string{
		designExample, scriptedFile, everyKindFile,
		"", "agent: a\ngoal: g\nscript: []\n",
		"agent: a\ngoal: g\nscript:\n  - &s {finish: {answer: *s}}\n",
		"agent: a\ngoal: g\nscript: [{tool_calls: [{tool: t, args: {1: x, b: .nan}}]}]\n",
		"agent: a\ngoal: g\nscript: [{wait_timer: {seconds: 1e400}}, {state_patch: {<<: {a: 1}}}]\n",
		"agent: !!binary aGk=\ngoal: 2024-01-01\nscript: [{finish: {answer: !!int 12}}]\n---\n",
		"{agent: a, goal: g, script: [{spawn: [{agent: b, goal: c, script: [{spawn: [{agent: d, goal: e}]}]}]}]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tf, err := ParseTaskFile("fuzz.yaml", data)
		if err != nil {
			return
		}
		if tf.Agent == "" || tf.Goal == "" {
			t.Fatalf("accepted a file without agent or goal: %q", data)
		}
		if err := tf.Script.Validate(); err != nil {
			t.Fatalf("accepted an invalid script: %v\n%q", err, data)
		}
		p := NewScripted(tf.Script)
		for turn := 1; turn <= p.Len()+1; turn++ {
			d, err := p.Decide(context.Background(), Input{Task: "F", Turn: turn})
			if err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
			if err := d.Validate(); err != nil {
				t.Fatalf("turn %d: %v", turn, err)
			}
		}
		b, err := tf.Script.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		back, err := ScriptFromJSON(b)
		if err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if len(back) == 0 && len(tf.Script) == 0 {
			return
		}
		if !reflect.DeepEqual(back, tf.Script) {
			t.Fatalf("round trip\ngot  %s\nwant %s", dump(back), dump(tf.Script))
		}
	})
}
