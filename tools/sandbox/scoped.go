package sandbox

import (
	"context"
	"fmt"
)

// Scoped confines each process under the policy of the scope it runs for:
// an agent's name for its tool calls, an MCP server's for the server. A
// scope without a policy of its own runs under Default.
type Scoped struct {
	// Sandbox starts the processes. Nil with Err set: the sandbox was
	// asked for and is not there, and every Command fails with Err.
	Sandbox *Sandbox
	Err     error
	Default Policy
	Scopes  map[string]Policy
	// Unconfined lists the scopes whose processes run outside the sandbox
	// (sandbox: {enabled: false} for them): the operator's explicit choice.
	Unconfined map[string]bool
}

// Policy returns the policy of scope.
func (s *Scoped) Policy(scope string) Policy {
	if p, ok := s.Scopes[scope]; ok {
		return p
	}
	return s.Default
}

// Command prepares spec under the policy of scope; it fails, naming what
// is missing, when the sandbox is unavailable.
func (s *Scoped) Command(ctx context.Context, scope string, spec Spec) (*Cmd, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: no sandbox", ErrUnavailable)
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("sandbox: no program to run")
	}
	if s.Unconfined[scope] {
		return plainCommand(ctx, spec), nil
	}
	if s.Sandbox == nil {
		if s.Err != nil {
			return nil, s.Err
		}
		return nil, fmt.Errorf("%w: no sandbox", ErrUnavailable)
	}
	return s.Sandbox.Command(ctx, s.Policy(scope), spec)
}

// Start starts spec under the policy of scope, on a helper started ahead
// (Sandbox.Start); it fails, naming what is missing, when the sandbox is
// unavailable.
func (s *Scoped) Start(ctx context.Context, scope string, spec Spec, stdio Stdio) (*Process, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: no sandbox", ErrUnavailable)
	}
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, fmt.Errorf("sandbox: no program to run")
	}
	if s.Unconfined[scope] {
		return startPlain(ctx, spec, stdio)
	}
	if s.Sandbox == nil {
		if s.Err != nil {
			return nil, s.Err
		}
		return nil, fmt.Errorf("%w: no sandbox", ErrUnavailable)
	}
	return s.Sandbox.Start(ctx, s.Policy(scope), spec, stdio)
}

// Close ends the sandbox's helper waiting for the next call.
func (s *Scoped) Close() error {
	if s == nil {
		return nil
	}
	return s.Sandbox.Close()
}
