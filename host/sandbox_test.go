package host

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/noeta-go/noeta/config"
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
