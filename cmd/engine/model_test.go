package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/noeta-go/noeta/timeline"
)

// modelConfig is a config whose agents' model is the fake server's.
func modelConfig(t *testing.T, f *fakeOpenAI, budget string) string {
	t.Helper()
	if budget == "" {
		budget = "{max_iterations: 10}"
	}
	return writeFile(t, "noeta.yaml", `
models:
  fake:
    provider: openai
    model: fake-1
    base_url: `+f.baseURL()+`
    max_retries: 1
    price: {input_per_mtok: 1000, output_per_mtok: 2000}
agents:
  researcher:
    model: fake
    system_prompt: "You are a careful research assistant."
    tools: [echo, shell, sleep]
    budget: `+budget+`
rules:
  - match_tool: shell
    match_shell: {path: command, program: rm, flags_all: [recursive, force]}
    action: deny
    reason: "destructive shell command"
`)
}

// modelTask is a task file its agent's model decides.
func modelTask(t *testing.T) string {
	return writeFile(t, "task.yaml", "agent: researcher\ngoal: \"Say hello through echo, then finish\"\n")
}

// TestModelAgentRun: a task file without a script runs its agent's model:
// turn 1 calls echo, turn 2 answers. The second request carries the
// system prompt, the goal, the call and its result; the tools offered are
// exactly the agent's (with their schemas); the timeline shows the model's
// tokens and cost.
func TestModelAgentRun(t *testing.T) {
	t.Parallel()
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		if req.turn() == 0 {
			return chatReply{ToolCalls: [][2]string{{"echo", `{"text":"hello"}`}}, In: 100, Out: 10}
		}
		return chatReply{Text: "done: " + req.lastTool(), In: 150, Out: 5}
	})
	code, out, errOut := runCmd(t, "run", modelTask(t), "--config", modelConfig(t, f, ""), "--data", t.TempDir(), "--workspace", workspace(t))
	if code != exitDone {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "completed: task") || !strings.Contains(out, "hello") {
		t.Errorf("run's outcome:\n%s", out)
	}
	if !strings.Contains(out, "tokens=100/10") {
		t.Errorf("the timeline does not show the model's tokens:\n%s", out)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	var offered []string
	for _, tl := range reqs[0].Tools {
		offered = append(offered, tl.Function.Name)
		if len(tl.Function.Parameters) == 0 {
			t.Errorf("tool %s offered without a schema", tl.Function.Name)
		}
	}
	for _, want := range []string{"echo", "shell", "sleep", "ask_human"} {
		if !strings.Contains(" "+strings.Join(offered, " ")+" ", " "+want+" ") {
			t.Errorf("tools offered %v lack %s", offered, want)
		}
	}
	for _, not := range []string{"read_file", "write_file", "spawn_subtask"} {
		if strings.Contains(" "+strings.Join(offered, " ")+" ", " "+not+" ") {
			t.Errorf("tools offered %v include %s, which the agent may not use", offered, not)
		}
	}
	second := reqs[1].Messages
	if len(second) < 4 || second[0].Role != "system" || !strings.Contains(second[0].text(), "careful research assistant") ||
		second[1].Role != "user" || !strings.Contains(second[1].text(), "Say hello") {
		t.Fatalf("second request's messages: %+v", second)
	}
	if reqs[1].lastTool() == "" || !strings.Contains(reqs[1].lastTool(), "hello") {
		t.Errorf("the echo result is not in the second request: %+v", second)
	}
}

// TestModelDenialReachesModel: a call a rule denies is fed back to the
// model as a tool error naming the guard and its reason, and the model
// adapts.
func TestModelDenialReachesModel(t *testing.T) {
	t.Parallel()
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		switch req.turn() {
		case 0:
			return chatReply{ToolCalls: [][2]string{{"shell", `{"command":"rm -rf /tmp/nothing-here"}`}}, In: 10, Out: 10}
		}
		return chatReply{Text: "understood: " + req.lastTool(), In: 10, Out: 10}
	})
	base, err := os.ReadFile(modelConfig(t, f, ""))
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "bypass.yaml", strings.Replace(string(base), "    tools: [echo, shell, sleep]", "    tools: [echo, shell, sleep]\n    permission_mode: bypassPermissions", 1))
	code, out, errOut := runCmd(t, "run", modelTask(t), "--config", cfg, "--data", t.TempDir(), "--workspace", workspace(t))
	if code != exitDone {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if got := reqs[1].lastTool(); !strings.Contains(got, "rules") || !strings.Contains(got, "destructive shell command") {
		t.Errorf("the denial reached the model as %q, want the guard (rules) and its reason", got)
	}
}

// TestModelApprovalInASecondProcess: a call that needs approval leaves the
// run waiting (exit 3); engine approve in another process runs the call
// with exactly the recorded arguments, and the model is asked once per
// turn in all.
func TestModelApprovalInASecondProcess(t *testing.T) {
	t.Parallel()
	ws := workspace(t)
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		if req.turn() == 0 {
			return chatReply{ToolCalls: [][2]string{{"shell", `{"command":"echo approved-and-ran > marker.txt"}`}}, In: 10, Out: 10}
		}
		return chatReply{Text: "ran it", In: 10, Out: 10}
	})
	cfg, data := modelConfig(t, f, ""), t.TempDir()
	code, out, errOut := runCmd(t, "run", modelTask(t), "--config", cfg, "--data", data, "--workspace", ws, "--approvals", "leave")
	if code != exitWaiting {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`engine approve ([0-9A-Z]{26}) (\S+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("run does not say how to approve:\n%s", out)
	}
	code, out, errOut = runCmd(t, "approve", m[1], m[2], "--as", "alice", "--config", cfg, "--data", data, "--workspace", ws)
	if code != exitDone {
		t.Fatalf("approve: exit %d\n%s\n%s", code, out, errOut)
	}
	b, err := os.ReadFile(ws + "/marker.txt")
	if err != nil || strings.TrimSpace(string(b)) != "approved-and-ran" {
		t.Errorf("the approved call did not run as recorded: %q %v", b, err)
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d model requests for two turns, want 2 (the model is asked once per turn)", n)
	}
}

// TestModelNotAskedAgainAfterACrash: serve is killed (SIGKILL) while the
// call its model decided runs; another serve takes the task over when the
// lease expires and carries the turn out from the recorded decision: the
// model is not asked again for that turn, and the call is not run twice.
func TestModelNotAskedAgainAfterACrash(t *testing.T) {
	t.Parallel()
	ws := workspace(t)
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		if req.turn() == 0 {
			return chatReply{ToolCalls: [][2]string{{"shell", `{"command":"echo run >> runs.txt; sleep 3"}`}}, In: 10, Out: 10}
		}
		return chatReply{Text: "finished", In: 10, Out: 10}
	})
	base, err := os.ReadFile(modelConfig(t, f, ""))
	if err != nil {
		t.Fatal(err)
	}
	// No approvals: bypassPermissions.
	cfg := writeFile(t, "bypass.yaml", strings.Replace(string(base), "    tools: [echo, shell, sleep]", "    tools: [echo, shell, sleep]\n    permission_mode: bypassPermissions", 1))
	data := t.TempDir()
	args := []string{"serve", "--config", cfg, "--data", data, "--workspace", ws, "--http", "", "--log-format", "json", "--lease-ttl", "2s"}
	a := startEngine(t, args...)
	a.waitLog(t, "serving", time.Minute)
	code, out, errOut := runCmd(t, "submit", modelTask(t), "--config", cfg, "--data", data, "--lease-ttl", "2s")
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	waitFor(t, time.Minute, "the call to start", func() bool {
		b, _ := os.ReadFile(ws + "/runs.txt")
		return len(b) > 0
	})
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	a.wait(t, 30*time.Second)
	b := startEngine(t, args...)
	b.waitLog(t, "serving", time.Minute)
	waitFor(t, 2*time.Minute, "the task to end under the second serve", func() bool {
		_, out, _ := runCmd(t, "inspect", id, "--data", data, "--lease-ttl", "2s")
		return strings.Contains(out, "status    terminal")
	})
	_ = b.cmd.Process.Signal(os.Interrupt)
	b.wait(t, time.Minute)
	runs, _ := os.ReadFile(ws + "/runs.txt")
	if n := strings.Count(string(runs), "run"); n != 1 {
		t.Errorf("the call ran %d times, want once", n)
	}
	// Turn 1 was decided once; turn 2 (after the call failed with the
	// crash) once.
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d model requests, want 2: turn 1 must be carried out from its record", n)
	}
	_, out, _ = runCmd(t, "events", id, "--data", data, "--lease-ttl", "2s")
	if got := strings.Count(out, "PolicyDecided"); got != 2 {
		t.Errorf("%d PolicyDecided records, want 2\n%s", got, out)
	}
}

// TestModelBudgetByUsage: max_cost_usd stops the agent on the cost of the
// model's usage at the configured price (1000 input + 2000 output dollars
// per million tokens: 100 in + 100 out = $0.30 a turn). Reproduction of the
// defect: the budget denied each further call, and the model, asked again
// every turn, kept proposing (and billing) — 3,822 requests in 3 minutes;
// max_iterations did not stop it either. Now the engine asks no policy once
// a budget denies every action point: the task fails, naming the cap.
func TestModelBudgetByUsage(t *testing.T) {
	t.Parallel()
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		return chatReply{ToolCalls: [][2]string{{"echo", fmt.Sprintf(`{"text":"turn %d"}`, req.turn()+1)}}, In: 100, Out: 100}
	})
	code, out, errOut := runCmd(t, "run", modelTask(t), "--config", modelConfig(t, f, "{max_cost_usd: 0.5, max_iterations: 10}"), "--data", t.TempDir(), "--workspace", workspace(t), "--timeout", "20s")
	if code != exitFailed || !strings.Contains(out, "budget exhausted before turn 3: max_cost_usd=0.5 reached") {
		t.Fatalf("run: exit %d, want 1 with the budget named\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "max_cost_usd") {
		t.Errorf("the budget did not stop the agent on its cost:\n%s", out)
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d model requests: the budget of $0.50 at $0.30 a turn stops it after the second\n%s", n, timeline.Cut(out, 3000))
	}
}

// TestModelTreeBudget is the hostile case from outside: under
// max_cost_usd: 3 a model root spawns a worker whose agent has no budget,
// and the worker's model bills $2 a call. Before, budgets applied per task
// only: the worker called its model until the run was stopped (the hostile
// run: $124 in 62 calls) and the root never counted it. Now the worker is
// allotted what the root had left, is stopped one call past it, and the
// root ends failed by the budget naming the tree.
func TestModelTreeBudget(t *testing.T) {
	t.Parallel()
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		for _, tool := range req.Tools {
			if tool.Function.Name == "spawn_subtask" {
				return chatReply{ToolCalls: [][2]string{{"spawn_subtask", `{"agent":"worker","goal":"spend"}`}}, In: 1, Out: 1}
			}
		}
		return chatReply{ToolCalls: [][2]string{{"echo", fmt.Sprintf(`{"text":"call %d"}`, req.turn()+1)}}, In: 2000}
	})
	cfg := writeFile(t, "noeta.yaml", `
models:
  fake:
    provider: openai
    model: fake-1
    base_url: `+f.baseURL()+`
    max_retries: 1
    price: {input_per_mtok: 1000, output_per_mtok: 1000}
agents:
  boss:
    model: fake
    tools: [echo]
    budget: {max_cost_usd: 3}
    permissions:
      allowed_subtask_agents: [worker]
  worker:
    model: fake
    tools: [echo]
`)
	task := writeFile(t, "task.yaml", "agent: boss\ngoal: \"Delegate\"\n")
	code, out, errOut := runCmd(t, "run", task, "--config", cfg, "--data", t.TempDir(), "--workspace", workspace(t), "--timeout", "20s")
	if n := len(f.requests()); n > 3 {
		t.Fatalf("%d model requests under max_cost_usd 3 at $2 a worker call: want the root's one and the worker's two\n%s", n, timeline.Cut(out, 3000))
	}
	if code != exitFailed || !strings.Contains(out, "max_cost_usd=3 reached by the task tree: $4.002 spent") {
		t.Fatalf("run: exit %d, want 1 with the tree's spend named\n%s\n%s", code, out, errOut)
	}
}

// TestModelMalformedArgsRun: a shell call whose arguments name the
// command twice (`{"command":"echo a","command":"rm -rf …"}`: JSON that
// encoding/json accepts and the log cannot hold) is refused as guard
// schema and nothing runs; the model is asked once more, with the
// refusal, and the task completes; events and doctor find nothing wrong.
// Before, the turn's record could not be written, the segment failed and
// was retried (the model asked and billed each time) until the dispatcher
// ended the task with no terminal record, and events and doctor reported
// a damaged store.
func TestModelMalformedArgsRun(t *testing.T) {
	t.Parallel()
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		if req.turn() == 0 {
			return chatReply{ToolCalls: [][2]string{{"shell", `{"command":"echo a","command":"rm -rf /tmp/x"}`}}, In: 100, Out: 10}
		}
		return chatReply{Text: "refused: " + req.lastTool(), In: 150, Out: 5}
	})
	data := t.TempDir()
	code, out, errOut := runCmd(t, "run", modelTask(t), "--config", modelConfig(t, f, ""), "--data", data, "--workspace", workspace(t))
	if code != exitDone {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	if reqs := f.requests(); len(reqs) != 2 || !strings.Contains(reqs[1].lastTool(), "duplicate object key") {
		t.Fatalf("%d model requests, the second's last tool message %q", len(reqs), reqs[len(reqs)-1].lastTool())
	}
	m := regexp.MustCompile(`task ([0-9A-Z]{26})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no task id in:\n%s", out)
	}
	code, out, errOut = runCmd(t, "events", m[1], "--data", data, "--json")
	if code != 0 || !strings.Contains(out, `"guard":"schema"`) || strings.Contains(out, "ToolCallStarted") || !strings.Contains(out, "TaskCompleted") {
		t.Errorf("events: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut = runCmd(t, "doctor", "--data", data); code != 0 {
		t.Errorf("doctor: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestModelShellContained: a model-decided agent whose shell tries to read
// the engine's environment (its API key), the data directory's credentials
// (inside the workspace, where the default layout puts it) and to write
// outside the workspace gets nothing: no secret reaches any record, the
// model, or the output, and nothing is written outside.
func TestModelShellContained(t *testing.T) {
	const secret = "sk-model-key-0123456789"
	t.Setenv("OPENAI_API_KEY", secret)
	ws := workspace(t)
	data := ws + "/.noeta"
	escape := fmt.Sprintf("/tmp/noeta-model-escape-%d", os.Getpid())
	attacks := []string{
		`cat /proc/$PPID/environ /proc/1/environ /proc/*/environ | tr '\0' '\n'; env`,
		`cat .noeta/credentials.json; ls -la .noeta; cat ` + data + `/engine.lock`,
		`echo pwn > ` + escape + `; echo pwn > ../escaped`,
		`cat /proc/self/status | grep Cap; ls /proc`,
	}
	f := newFakeOpenAI(t, func(req chatRequest) chatReply {
		if n := req.turn(); n < len(attacks) {
			args := fmt.Sprintf(`{"command":%q}`, attacks[n])
			return chatReply{ToolCalls: [][2]string{{"shell", args}}, In: 10, Out: 10}
		}
		return chatReply{Text: "done", In: 10, Out: 1}
	})
	code, out, errOut := runCmd(t, "run", modelTask(t), "--config", modelConfig(t, f, ""), "--data", data,
		"--workspace", ws, "--approvals", "approve")
	if code != exitDone {
		t.Fatalf("run: exit %d\n%s\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`task (\S+) answered`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no task id in:\n%s", out)
	}
	code, events, errOut := runCmd(t, "events", m[1], "--json", "--data", data)
	if code != 0 || !strings.Contains(events, `"noeta.ToolCallFinished"`) {
		t.Fatalf("events %s: exit %d\n%s\n%s\nrun:\n%s", m[1], code, events, errOut, out)
	}
	if n := strings.Count(events, `"type":"noeta.ToolCallFinished"`); n != len(attacks) {
		t.Errorf("%d shell calls finished, want %d:\n%s", n, len(attacks), events)
	}
	var sent strings.Builder
	for _, r := range f.requests() {
		sent.WriteString(r.lastTool())
	}
	for what, text := range map[string]string{"the records": events, "the output": out + errOut, "the model": sent.String()} {
		if strings.Contains(text, secret) {
			t.Errorf("the API key is in %s", what)
		}
		if strings.Contains(text, `"password"`) {
			t.Errorf("the data directory's credentials are in %s", what)
		}
	}
	if !strings.Contains(sent.String(), "CapEff:\t0000000000000000") && !strings.Contains(sent.String(), `CapEff:\t0000000000000000`) {
		t.Errorf("the shell ran with capabilities, or not at all: %s", sent.String())
	}
	for _, p := range []string{escape, ws + "/../escaped"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("the shell wrote %s", p)
			_ = os.Remove(p)
		}
	}
}
