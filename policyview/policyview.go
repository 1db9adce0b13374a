// Package policyview is what the engine's policy verbs do, below their
// flags: replay a config over the recorded log (Replay), run a policy's
// unit tests (LoadCases, Test), and summarise the shadow rules' recorded
// verdicts (Shadow). It builds the judge a host of the config would build
// (Judge) without starting anything: no tool runs, no MCP server starts.
// The verbs decide the exit codes; errors here are plain.
package policyview

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/boundedio"
	"github.com/noeta-go/noeta/internal/govfile"
	"github.com/noeta-go/noeta/replay"
	"github.com/noeta-go/noeta/tools"
	"github.com/noeta-go/noeta/tools/mcp"
)

// Judge is the judge of cfg's guard stacks, built as a host of cfg builds
// them: the built-in tools' risk levels and edit flags, and for an MCP
// server's tool the config's risk and edits override. A tool of an MCP
// server whose risk the config does not give has the level the server's
// annotations say, which neither the log nor the config holds: an action
// whose verdict needs it is not replayed (replay.JudgeOptions.Outside).
func Judge(cfg *config.File) (*replay.Judge, error) {
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		return nil, err
	}
	reg, err := tools.NewRegistry(builtins...)
	if err != nil {
		return nil, err
	}
	mcpTool := func(name string) (config.MCPTool, bool, bool) {
		rest, ok := strings.CutPrefix(name, mcp.ToolPrefix)
		if !ok {
			return config.MCPTool{}, false, false
		}
		server, tool, _ := strings.Cut(rest, mcp.ToolSeparator)
		s, ok := cfg.MCPServers[server]
		if !ok {
			return config.MCPTool{}, false, false
		}
		t := s.Tools[tool]
		return t, true, t.Risk != ""
	}
	return replay.NewJudge(cfg.Governance, replay.JudgeOptions{
		Risks: func(name string) (string, bool) {
			if t, _, known := mcpTool(name); known {
				return t.Risk, true
			}
			return reg.RiskString(name)
		},
		Edits: func(name string) bool {
			if t, ok, _ := mcpTool(name); ok {
				return t.Edits
			}
			return reg.Edits(name)
		},
		Outside: func(name string) bool {
			_, ok, known := mcpTool(name)
			return ok && !known
		},
	}), nil
}

// Replay re-judges the recorded actions of the tasks f keeps, on h's log,
// under cfg, and prints the report (replay.WriteReport). changed reports
// whether any verdict would change.
func Replay(ctx context.Context, h *host.Host, cfg *config.File, f replay.Filter, w io.Writer, asJSON bool) (changed bool, err error) {
	j, err := Judge(cfg)
	if err != nil {
		return false, err
	}
	b := h.Backend()
	rep, err := replay.Run(ctx, b.Log(), b.Content(), j, f)
	if err != nil {
		return false, noTask(err, f)
	}
	return rep.Changed > 0, replay.WriteReport(w, cfg.Path, f, rep, asJSON)
}

// Shadow prints what the shadow rules recorded on h's log would have done
// (replay.ShadowReport, replay.WriteShadow).
func Shadow(ctx context.Context, h *host.Host, f replay.Filter, w io.Writer, asJSON bool) error {
	sum, err := replay.ShadowReport(ctx, h.Backend().Log(), f)
	if err != nil {
		return noTask(err, f)
	}
	return replay.WriteShadow(w, f, sum, asJSON)
}

// noTask says that the task --task names is not there, as the read verbs
// say it.
func noTask(err error, f replay.Filter) error {
	if f.Task != "" && errors.Is(err, eventlog.ErrNotFound) {
		return fmt.Errorf("no task %s in this deployment", f.Task)
	}
	return err
}

// NoData reports a data directory that is not there, with nothing
// recorded in it: a reader says so rather than make one.
func NoData(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no data directory %s: nothing was recorded there (--data names it)", dir)
	}
	return nil
}

// LoadTest reads what a policy test is given: a governance config, a whole
// noeta.yaml (govfile.Load: its errors name the file, line and field), and
// a cases file (LoadCases).
func LoadTest(ctx context.Context, configPath, casesPath string) (*config.File, []replay.Case, error) {
	cfg, err := govfile.Load(ctx, configPath)
	if err != nil {
		return nil, nil, err
	}
	cases, err := LoadCases(ctx, casesPath, cfg)
	return cfg, cases, err
}

// LoadCases reads a cases file, a regular file of at most
// replay.MaxCasesBytes, whose every case names an agent of cfg.
func LoadCases(ctx context.Context, path string, cfg *config.File) ([]replay.Case, error) {
	b, err := boundedio.ReadFile(ctx, path, replay.MaxCasesBytes)
	if err != nil {
		return nil, fmt.Errorf("cases file: %w", err)
	}
	cases, err := replay.ParseCases(path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	for i, c := range cases {
		if _, ok := cfg.Governance.Agent(c.Agent); !ok {
			return nil, fmt.Errorf("%s: cases[%d] (%s): agent %q is not an agent of %s (its agents: %s)",
				path, i, c.Name, c.Agent, cfg.Path, strings.Join(cfg.Governance.Agents(), ", "))
		}
	}
	return cases, nil
}

// Test judges cases under cfg and prints the failures and the count
// (replay.WriteCases), naming casesPath. failed reports a case that did not
// get what it expects.
func Test(ctx context.Context, cfg *config.File, casesPath string, cases []replay.Case, w io.Writer, asJSON bool) (failed bool, err error) {
	j, err := Judge(cfg)
	if err != nil {
		return false, err
	}
	res := replay.Test(ctx, j, cases)
	for _, r := range res {
		failed = failed || !r.Pass
	}
	return failed, replay.WriteCases(w, cfg.Path, casesPath, res, asJSON)
}
