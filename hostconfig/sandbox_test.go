package hostconfig

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
)

// TestConfinement: the config's sandbox: levels become the scopes' policies
// (an agent's over the top level, a server's processor and wall time
// unbounded unless set), enabled: false makes a scope unconfined, a config
// that disables it everywhere confines nothing, and no config is the
// default: confined.
func TestConfinement(t *testing.T) {
	cfg, err := config.Parse("noeta.yaml", []byte(`
sandbox:
  read: [/opt/tools]
  limits: {memory_mb: 100}
agents:
  coder:
    tools: [shell]
    sandbox: {network: {allow: ["api.github.com:443"]}, limits: {cpu_seconds: 7}}
  loose:
    tools: [shell]
    sandbox: {enabled: false}
mcp_servers:
  files: {command: [/bin/cat], sandbox: {write: [/srv]}}
`))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	s := confinement(context.Background(), cfg, []string{"/data"}, logger, false)
	if s == nil || s.Err != nil || s.Sandbox == nil {
		t.Fatalf("confinement: %+v", s)
	}
	coder := s.Policy(agentScope("coder"))
	if len(coder.Allow) != 1 || coder.Limits.CPU != 7*time.Second || coder.Limits.Memory != 100<<20 ||
		len(coder.Read) != 1 || coder.Read[0] != "/opt/tools" || len(coder.Hide) != 1 || coder.Hide[0] != "/data" {
		t.Errorf("coder's policy: %+v", coder)
	}
	if !s.Unconfined[agentScope("loose")] || s.Unconfined[agentScope("coder")] {
		t.Errorf("unconfined scopes: %v", s.Unconfined)
	}
	files := s.Policy(mcpScope("files"))
	if files.Limits.CPU >= 0 || files.Limits.Wall >= 0 || len(files.Write) != 1 || len(files.Allow) != 0 {
		t.Errorf("the server's policy: %+v", files)
	}
	if d := s.Policy("nobody"); len(d.Allow) != 0 || d.Limits.Memory != 100<<20 {
		t.Errorf("the default policy: %+v", d)
	}

	// An agent named as a server's scope would be is still an agent.
	clash, err := config.Parse("noeta.yaml", []byte(`
agents:
  "mcp:files": {tools: [shell]}
mcp_servers:
  files: {command: [/bin/cat], sandbox: {enabled: false}}
`))
	if err == nil {
		s := confinement(context.Background(), clash, nil, logger, false)
		if s == nil || s.Unconfined[agentScope("mcp:files")] || !s.Unconfined[mcpScope("files")] {
			t.Errorf("an agent named mcp:files took the server's scope: %+v", s)
		}
	}

	off, err := config.Parse("noeta.yaml", []byte("sandbox: {enabled: false}\nagents: {a: {tools: [shell]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := confinement(context.Background(), off, nil, logger, false); s != nil {
		t.Errorf("a config with the sandbox off everywhere confines: %+v", s)
	}
	if s := confinement(context.Background(), nil, nil, logger, false); s == nil || s.Sandbox == nil {
		t.Errorf("no config: %+v, want the default sandbox", s)
	}
}

// TestABombLeavesOtherTasksAlone: in one engine, one task's shell runs a
// fork bomb and a memory bomb while another task's shell calls run: each
// bomb is ended by its limit and recorded failed naming it, the other
// task's calls all succeed, and the engine goes on taking tasks.
func TestABombLeavesOtherTasksAlone(t *testing.T) {
	cfg, err := config.Parse("noeta.yaml", []byte(`
sandbox:
  limits: {processes: 32, memory_mb: 64, wall_seconds: 60}
agents:
  worker:
    tools: [shell]
    permission_mode: bypassPermissions
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(t.Context(), Options{DataDir: t.TempDir(), Config: cfg, Workers: 4, Workspace: t.TempDir(), Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	ctx := t.Context()
	bomb, err := h.Submit(ctx, task(t, `agent: worker
goal: bombs
script:
  - tool_calls: [{tool: shell, args: {command: 'b(){ b | b & }; b; sleep 30'}}]
  - tool_calls: [{tool: shell, args: {command: 'head -c 2000000000 /dev/zero | tail'}}]
  - finish: {answer: survived}
`))
	if err != nil {
		t.Fatal(err)
	}
	var calm string
	for i := range 6 {
		calm += fmt.Sprintf("  - tool_calls: [{tool: shell, args: {command: 'echo calm-%d'}}]\n", i)
	}
	quiet, err := h.Submit(ctx, task(t, "agent: worker\ngoal: quiet\nscript:\n"+calm+"  - finish: {answer: calm}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{bomb, quiet} {
		if rest, err := h.Wait(ctx, id); err != nil || rest.Status != host.RestCompleted {
			t.Fatalf("task %s: %+v, %v", id, rest, err)
		}
	}
	finished := func(id string) []noeta.ToolCallFinished {
		envs, err := h.Events(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []noeta.ToolCallFinished
		for _, e := range envs {
			p, ok, err := e.Decode()
			if err != nil || !ok {
				continue
			}
			if f, ok := p.(*noeta.ToolCallFinished); ok {
				out = append(out, *f)
			}
		}
		return out
	}
	got := finished(bomb)
	if len(got) != 2 {
		t.Fatalf("the bomb task finished %d calls, want 2: %+v", len(got), got)
	}
	for i, limit := range []string{"processes", "memory"} {
		if got[i].OK || !strings.Contains(got[i].Error, "sandbox's "+limit+" limit") {
			t.Errorf("bomb %d: ok %v, error %q; want failed naming the %s limit", i, got[i].OK, got[i].Error, limit)
		}
	}
	calmCalls := finished(quiet)
	if len(calmCalls) != 6 {
		t.Fatalf("the quiet task finished %d calls, want 6", len(calmCalls))
	}
	for i, f := range calmCalls {
		if !f.OK || !strings.Contains(string(f.Output), fmt.Sprintf("calm-%d", i)) {
			t.Errorf("quiet call %d: ok %v, output %s, error %q", i, f.OK, f.Output, f.Error)
		}
	}
	// The engine takes a task after.
	after, err := h.Submit(ctx, task(t, "agent: worker\ngoal: after\nscript:\n  - tool_calls: [{tool: shell, args: {command: 'echo after'}}]\n  - finish: {answer: after}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rest, err := h.Wait(ctx, after); err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("a task after the bombs: %+v, %v", rest, err)
	}
}
