package sandbox

import "time"

// Policy is what one sandboxed process may do: the files it may read and
// write beyond the workspace, where it may connect, and how much it may use.
// The zero Policy is the strictest: no network, the workspace only, the
// default limits.
type Policy struct {
	// Read lists absolute paths (files or directories) the process may read
	// and execute, beside the system's program and library directories.
	Read []string
	// Write lists absolute paths it may also write, beside the workspace.
	Write []string
	// Hide lists absolute paths the process must not see even where Read
	// or Write (or the workspace) would let it: each is covered, in the
	// sandbox's own mount namespace, by an empty read-only directory (or
	// an empty file). The engine's data directory, which the default
	// workspace (the working directory) contains, is the case in point.
	Hide []string
	// Allow lists the host:port pairs the process may reach through the
	// egress proxy ("api.github.com:443", "*.internal:8080"). Empty: no
	// network at all, only a loopback of its own.
	Allow []string
	// Limits bound the process tree; a zero member takes its default.
	Limits Limits
}

// Limits bound what a sandboxed process tree may use. Zero is the default,
// which [Limits.WithDefaults] fills in; a negative CPU or Wall is no limit
// (a long-lived MCP server's).
type Limits struct {
	// CPU is the processor time of the whole tree, which the sandbox's
	// first process watches (every 20ms).
	CPU time.Duration
	// Memory is the resident memory of the whole tree, watched likewise;
	// memory a tree could hold beside it (anonymous memory files) is
	// refused.
	Memory int64
	// Processes is how many processes the tree may hold at once.
	Processes int
	// FileSize is the largest file a process may write (RLIMIT_FSIZE).
	FileSize int64
	// OpenFiles is how many files each process may hold open (RLIMIT_NOFILE).
	OpenFiles int
	// Wall is how long the tree may live; a caller's own timeout may end it
	// sooner.
	Wall time.Duration
}

// The default limits: enough for a build or a test run, small enough that a
// runaway command cannot take the host with it.
const (
	DefaultCPU       = 5 * time.Minute
	DefaultMemory    = 2 << 30 // 2 GiB
	DefaultProcesses = 256
	DefaultFileSize  = 1 << 30 // 1 GiB
	DefaultOpenFiles = 1024
	DefaultWall      = 30 * time.Minute
)

// WithDefaults returns l with every zero member set to its default.
func (l Limits) WithDefaults() Limits {
	if l.CPU == 0 {
		l.CPU = DefaultCPU
	}
	if l.Memory <= 0 {
		l.Memory = DefaultMemory
	}
	if l.Processes <= 0 {
		l.Processes = DefaultProcesses
	}
	if l.FileSize <= 0 {
		l.FileSize = DefaultFileSize
	}
	if l.OpenFiles <= 0 {
		l.OpenFiles = DefaultOpenFiles
	}
	if l.Wall == 0 {
		l.Wall = DefaultWall
	}
	return l
}
