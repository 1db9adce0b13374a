package replay_test

import (
	"strings"
	"testing"

	"github.com/noeta-go/noeta/replay"
)

const casesDoc = `
cases:
  - name: a greeting runs
    agent: a
    tool_call: {tool: echo, args: {text: hello}}
    expect: allow
  - name: no secrets
    agent: a
    tool_call: {tool: echo, args: {text: "a secret"}}
    expect: deny
    guard: rules
  - name: shouting asks
    agent: a
    tool_call: {tool: echo, args: {text: LOUD}}
    expect: require_approval
  - name: a tool the agent lacks
    agent: a
    tool_call: {tool: shell, args: {command: ls}}
    expect: deny
  - name: finishing is fine
    agent: a
    finish: {answer: done}
    expect: allow
  - name: a wrong expectation
    agent: a
    tool_call: {tool: echo, args: {text: hello}}
    expect: deny
  - name: an unknown agent
    agent: nobody
    finish: {answer: done}
    expect: allow
`

// TestCases: each case judged by the config's stack; a wrong expectation
// and an agent the config lacks fail, naming why.
func TestCases(t *testing.T) {
	t.Parallel()
	cases, err := replay.ParseCases("cases.yaml", strings.NewReader(casesDoc))
	if err != nil {
		t.Fatal(err)
	}
	res := replay.Test(t.Context(), judge(t, agentsDoc+denySecret+strings.TrimPrefix(askLoud, "\nrules:\n")), cases)
	want := map[string]bool{"a greeting runs": true, "no secrets": true, "shouting asks": true, "a tool the agent lacks": true,
		"finishing is fine": true, "a wrong expectation": false, "an unknown agent": false}
	for _, r := range res {
		if r.Pass != want[r.Name] {
			t.Errorf("%s: pass %v (got %+v, err %q), want %v", r.Name, r.Pass, r.Got, r.Err, want[r.Name])
		}
	}
	if last := res[len(res)-1]; !strings.Contains(last.Err, "nobody") {
		t.Errorf("an unknown agent: %q", last.Err)
	}
}

// TestBadCases: a cases file that cannot be meant is refused naming the
// case and what is wrong.
func TestBadCases(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		"cases: []\n": "no cases",
		"cases:\n  - {agent: a, finish: {answer: x}, expect: allow}\n":                                   "cases[0]: name is required",
		"cases:\n  - {name: n, finish: {answer: x}, expect: allow}\n":                                    "(n): agent is required",
		"cases:\n  - {name: n, agent: a, expect: allow}\n":                                               "exactly one of tool_call and finish",
		"cases:\n  - {name: n, agent: a, finish: {answer: x}, tool_call: {tool: echo}, expect: allow}\n": "exactly one of tool_call and finish",
		"cases:\n  - {name: n, agent: a, finish: {answer: x}, expect: maybe}\n":                          `expect is "maybe"`,
		"cases:\n  - {name: n, agent: a, finish: {answer: x}, expect: allow, when: later}\n":             "field when not found",
		"cases:\n  - {name: n, agent: a, tool_call: {args: {}}, expect: allow}\n":                        "tool_call.tool is required",
	} {
		_, err := replay.ParseCases("cases.yaml", strings.NewReader(doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", doc, err, want)
		}
	}
}
