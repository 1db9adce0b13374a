// Package govfile loads what a command is handed: a governance config
// (noeta.yaml), decoded strictly, every mistake reported as FILE:LINE:
// field.path: message and every tool it names checked against the built-in
// tools; and a task file, checked against that config (its agent is one of
// the config's, and one without a script has a model to decide it). Every
// error it returns is the caller's mistake to fix, never the runtime's.
package govfile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/boundedio"
	"github.com/noeta-go/noeta/policy"
	"github.com/noeta-go/noeta/tools"
)

// Load reads a config, a regular file of at most config.MaxSize bytes,
// until ctx ends.
func Load(ctx context.Context, path string) (*config.File, error) {
	data, err := boundedio.ReadFile(ctx, path, config.MaxSize)
	if err != nil {
		return nil, err
	}
	return parse(ctx, path, data)
}

// Parse parses a governance config and checks every tool it names against
// the built-in tools, which are the tools of every command's registry: a
// misspelt tool is refused here, not when a task of the agent first runs.
func Parse(name string, data []byte) (*config.File, error) {
	return parse(context.Background(), name, data)
}

// parse is Parse, reading the file mcp_servers_file names until ctx ends.
func parse(ctx context.Context, name string, data []byte) (*config.File, error) {
	cfg, err := config.ParseContext(ctx, name, data)
	if err != nil {
		return nil, errors.New(Errors(name, err))
	}
	known, err := builtinToolNames()
	if err != nil {
		return nil, err
	}
	if err := cfg.CheckTools(known); err != nil {
		return nil, errors.New(Errors(name, err))
	}
	return cfg, nil
}

// Governance loads the governance config at path, or def in the working
// directory when path is empty.
func Governance(ctx context.Context, path, def string) (*config.File, error) {
	if path == "" {
		if _, err := os.Stat(def); err != nil {
			return nil, fmt.Errorf("no governance config: pass --config FILE (there is no %s in the working directory)", def)
		}
		path = def
	}
	cfg, err := Load(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("--config: %v", err)
	}
	return cfg, nil
}

// Task reads a task file whose agent must be one of cfg's, and returns it
// with its submission.
func Task(ctx context.Context, taskPath string, cfg *config.File) (policy.TaskFile, host.Submission, error) {
	tf, err := policy.LoadTaskFileContext(ctx, taskPath)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) ||
			errors.Is(err, boundedio.ErrNotRegular) || errors.Is(err, boundedio.ErrTooLarge) {
			return tf, host.Submission{}, fmt.Errorf("task file: %v", err)
		}
		return tf, host.Submission{}, err
	}
	gov := cfg.Governance
	if _, ok := gov.Agent(tf.Agent); !ok {
		return tf, host.Submission{}, fmt.Errorf("%s: agent: %q is not an agent of %s (its agents: %s)", taskPath, tf.Agent, cfg.Path, strings.Join(gov.Agents(), ", "))
	}
	if am := cfg.AgentModels[tf.Agent]; !tf.Scripted && am.Model == "" {
		return tf, host.Submission{}, fmt.Errorf("%s: the task has no script: and agent %q has no model: in %s to decide it", taskPath, tf.Agent, cfg.Path)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		return tf, host.Submission{}, fmt.Errorf("%s: %v", taskPath, err)
	}
	return tf, sub, nil
}

// builtinToolNames is the names of the tools the stack registers.
func builtinToolNames() ([]string, error) {
	builtins, err := tools.Builtins(tools.BuiltinConfig{})
	if err != nil {
		return nil, err
	}
	names := make([]string, len(builtins))
	for i, t := range builtins {
		names[i] = t.Name()
	}
	return names, nil
}

// Errors renders the errors of config.Parse one per line, each prefixed
// with the file name and line: name, or the file the error names (the
// MCP client's file mcp_servers_file reads).
func Errors(name string, err error) string {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	lines := make([]string, 0, len(list))
	for _, e := range list {
		var ce *config.Error
		switch {
		case errors.As(e, &ce):
			file := name
			if ce.File != "" {
				file = ce.File
			}
			loc := file + ": "
			if ce.Line > 0 {
				loc = fmt.Sprintf("%s:%d: ", file, ce.Line)
			}
			if ce.Path != "" {
				loc += ce.Path + ": "
			}
			lines = append(lines, loc+ce.Msg)
		default:
			lines = append(lines, name+": "+e.Error())
		}
	}
	return strings.Join(lines, "\n")
}
