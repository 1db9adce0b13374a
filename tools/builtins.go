package tools

import (
	"fmt"
	"path/filepath"
	"time"
)

// The defaults of [BuiltinConfig].
const (
	DefaultShellTimeout = 30 * time.Second
	DefaultOutputCap    = 64 << 10
	DefaultMaxReadBytes = 1 << 20
	DefaultShellPath    = "/bin/sh"
	DefaultMaxSleep     = 60 * time.Second
)

// BuiltinConfig sets the limits of the built-in tools. A zero field means its
// default.
type BuiltinConfig struct {
	// ShellTimeout is both the timeout of a shell call that names none and the
	// most a call may ask for with timeout_seconds. Default 30s.
	ShellTimeout time.Duration
	// OutputCap is how many bytes of stdout, and separately of stderr, a shell
	// call keeps; the rest is read and dropped and the result says
	// "truncated": true. Default 64 KiB.
	OutputCap int
	// MaxReadBytes is how much of a file read_file returns. Default 1 MiB.
	MaxReadBytes int
	// ShellPath is the absolute path of the shell that runs "-c command".
	// Default /bin/sh.
	ShellPath string
	// MaxSleep is the longest sleep a call may ask for. Default 60s.
	MaxSleep time.Duration
	// Sandbox, when set, confines every shell command under the calling
	// agent's policy (a *sandbox.Scoped); a sandbox that is unavailable
	// refuses every command. Nil runs commands unconfined: only a caller
	// that chose so (sandbox: {enabled: false}) leaves it nil.
	Sandbox Confiner
}

// withDefaults fills the zero fields.
func (c BuiltinConfig) withDefaults() BuiltinConfig {
	if c.ShellTimeout == 0 {
		c.ShellTimeout = DefaultShellTimeout
	}
	if c.OutputCap == 0 {
		c.OutputCap = DefaultOutputCap
	}
	if c.MaxReadBytes == 0 {
		c.MaxReadBytes = DefaultMaxReadBytes
	}
	if c.ShellPath == "" {
		c.ShellPath = DefaultShellPath
	}
	if c.MaxSleep == 0 {
		c.MaxSleep = DefaultMaxSleep
	}
	return c
}

// Validate reports a negative limit or a shell path that is not absolute,
// naming the field.
func (c BuiltinConfig) Validate() error {
	switch {
	case c.ShellTimeout < 0:
		return fmt.Errorf("tools: ShellTimeout %v is negative", c.ShellTimeout)
	case c.OutputCap < 0:
		return fmt.Errorf("tools: OutputCap %d is negative", c.OutputCap)
	case c.MaxReadBytes < 0:
		return fmt.Errorf("tools: MaxReadBytes %d is negative", c.MaxReadBytes)
	case c.MaxSleep < 0:
		return fmt.Errorf("tools: MaxSleep %v is negative", c.MaxSleep)
	case c.ShellPath != "" && !filepath.IsAbs(c.ShellPath):
		return fmt.Errorf("tools: ShellPath %q is not absolute", c.ShellPath)
	}
	return nil
}

// Builtins returns the built-in tools, configured by cfg, in a fresh slice:
//
//	echo        low               returns its args
//	sleep       low               waits {seconds}
//	read_file   low               reads {path} in the workspace
//	write_file  high, edit tool   writes {path, content, mode?} in the workspace
//	shell       high              runs {command, timeout_seconds?} in the workspace
//
// It fails only when cfg does not validate.
func Builtins(cfg BuiltinConfig) ([]Tool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return []Tool{
		echoTool{},
		sleepTool{max: cfg.MaxSleep},
		readFileTool{maxBytes: cfg.MaxReadBytes},
		writeFileTool{},
		shellTool{path: cfg.ShellPath, timeout: cfg.ShellTimeout, outputCap: cfg.OutputCap, confine: cfg.Sandbox},
	}, nil
}
