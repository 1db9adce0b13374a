package hostconfig

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/tools/sandbox"
)

// mcpScope and agentScope are the sandbox scopes of an MCP server's
// process and of an agent's tool calls: prefixed both, so that no agent's
// name can be taken for a server's.
func mcpScope(server string) string  { return "mcp:" + server }
func agentScope(agent string) string { return "agent:" + agent }

// agentConfiner gives the shell the policy of the calling agent's scope.
type agentConfiner struct{ s *sandbox.Scoped }

func (c agentConfiner) Start(ctx context.Context, agent string, spec sandbox.Spec, stdio sandbox.Stdio) (*sandbox.Process, error) {
	return c.s.Start(ctx, agentScope(agent), spec, stdio)
}

// confinement is the sandbox the config asks for: every agent's tool
// processes and every stdio MCP server under its policy, the sandbox on
// unless sandbox: {enabled: false} says otherwise. Nil when no scope is
// confined (the whole sandbox disabled). When the sandbox is asked for and
// this kernel or program cannot give it, the result holds the reason and
// every process it should confine is refused: nothing runs unconfined in
// its place. hide is what no sandboxed process may see (the data
// directory). With warn, it logs what runs unconfined and what cannot run,
// as every start of a host that runs tools must.
func confinement(ctx context.Context, cfg *config.File, hide []string, logger *slog.Logger, warn bool) *sandbox.Scoped {
	var top config.Sandbox
	scopes := map[string]config.Sandbox{}
	if cfg != nil {
		top = cfg.Sandbox
		if cfg.Governance != nil {
			for _, a := range cfg.Governance.Agents() {
				scopes[agentScope(a)] = cfg.SandboxFor(a)
			}
		}
		for name, srv := range cfg.MCPServers {
			if srv.Stdio() {
				scopes[mcpScope(name)] = cfg.SandboxForMCP(name)
			}
		}
	}
	s := &sandbox.Scoped{Default: policyOf(top, hide), Scopes: map[string]sandbox.Policy{}, Unconfined: map[string]bool{}}
	confined := top.IsEnabled()
	for name, sb := range scopes {
		p := policyOf(sb, hide)
		if strings.HasPrefix(name, "mcp:") {
			// A server lives as long as the engine: its processor time
			// and wall time are bounded only where the config says so.
			if sb.Limits.CPUSeconds == nil {
				p.Limits.CPU = -1
			}
			if sb.Limits.WallSeconds == nil {
				p.Limits.Wall = -1
			}
		}
		s.Scopes[name] = p
		if sb.IsEnabled() {
			confined = true
		} else {
			s.Unconfined[name] = true
		}
	}
	if warn && cfg != nil {
		if off := cfg.SandboxDisabled(); len(off) > 0 {
			logger.Warn("sandbox: disabled by the config; the tools concerned run unconfined, with the engine's reach", "where", off)
		}
	}
	if !confined {
		return nil
	}
	if s.Sandbox, s.Err = sandbox.New(ctx, sandbox.Options{}); s.Err != nil && warn {
		logger.Error("sandbox: unavailable; every shell command and stdio MCP server it should confine is refused", "err", s.Err)
	}
	return s
}

// policyOf is the sandbox policy of a config level in force.
func policyOf(c config.Sandbox, hide []string) sandbox.Policy {
	p := sandbox.Policy{Read: c.Read, Write: c.Write, Hide: hide}
	if c.Network != nil && !c.Network.None {
		p.Allow = c.Network.Allow
	}
	l := c.Limits
	seconds := func(v *int) time.Duration {
		if v == nil {
			return 0
		}
		return time.Duration(*v) * time.Second
	}
	mib := func(v *int) int64 {
		if v == nil {
			return 0
		}
		return int64(*v) << 20
	}
	p.Limits = sandbox.Limits{CPU: seconds(l.CPUSeconds), Wall: seconds(l.WallSeconds),
		Memory: mib(l.MemoryMB), FileSize: mib(l.FileSizeMB)}
	if l.Processes != nil {
		p.Limits.Processes = *l.Processes
	}
	if l.OpenFiles != nil {
		p.Limits.OpenFiles = *l.OpenFiles
	}
	return p
}

// hiddenPaths is what no sandboxed process may see even where its policy
// reaches: the embedded server's data directory (credentials, the lock),
// which the default workspace, the working directory, contains; and the
// engine's own NATS credentials and TLS key files.
func hiddenPaths(o Options) []string {
	var paths []string
	add := func(p string) {
		if p == "" {
			return
		}
		d, err := filepath.Abs(p)
		if err != nil {
			return
		}
		r, err := filepath.EvalSymlinks(d)
		if err != nil {
			return // nothing there to hide; a confined call fails if one appears and goes
		}
		paths = append(paths, r)
	}
	if o.embedded() {
		add(o.DataDir)
	}
	add(o.NATS.Creds)
	add(o.NATS.TLSKey)
	return paths
}

// CheckSandbox probes the sandbox cfg asks for (nil: the default, on) and
// records it in the report; a sandbox that is asked for and unavailable is
// a problem (sandbox_unavailable): every tool process it should confine
// would be refused.
func CheckSandbox(ctx context.Context, r *jshost.DoctorReport, cfg *config.File) {
	sr := &jshost.SandboxReport{}
	r.Sandbox = sr
	if cfg != nil {
		sr.Disabled = cfg.SandboxDisabled()
	}
	s := confinement(ctx, cfg, nil, slog.New(slog.DiscardHandler), false)
	if s == nil {
		return
	}
	sr.Enabled = true
	if s.Err != nil {
		sr.Error = s.Err.Error()
		r.Add(jshost.Finding{Kind: "sandbox_unavailable", Detail: sr.Error})
		return
	}
	sr.Available = true
	sup := s.Sandbox.Support()
	sr.LandlockABI, sr.Seccomp, sr.UserNamespaces = sup.LandlockABI, sup.Seccomp, sup.UserNamespaces
}
