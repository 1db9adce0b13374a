// Package sandboxinit is the sandbox's first process (package
// tools/sandbox): what runs inside the new namespaces, builds the tool's
// root, confines itself and watches the tool's tree. It is kept apart from
// the package that starts it so that the helper binary links only this,
// and a call pays the start-up of a small program, not of the engine.
//
// Nothing here is an API: Wire and Status are the two ends of one
// build's pipe, and a helper from another build refuses the spec.
package sandboxinit

// Name is the name the helper binary is started under (its argv[0]).
const Name = "noeta-sandbox-init"

// Version changes whenever Wire or the helper's behaviour does.
const Version = 2

// MaxWire bounds the spec the helper reads, and MaxStatus what the engine
// reads back.
const (
	MaxWire   = 1 << 20
	MaxStatus = 64 << 10
)

// Wire is what the engine hands the helper: the spec, the policy, the
// proxy's socket and the seccomp filter (built by the engine, so that the
// helper needs no filter compiler).
type Wire struct {
	// Version is Version: a helper binary from another build refuses a
	// spec it may read differently.
	Version int      `json:"version"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir"`
	Read    []string `json:"read,omitempty"`
	Write   []string `json:"write,omitempty"`
	Hide    []string `json:"hide,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
	Proxy   string   `json:"proxy,omitempty"`
	Seccomp []Insn   `json:"seccomp"`
	Limits  struct {
		CPUSeconds int64 `json:"cpu_seconds"`
		Memory     int64 `json:"memory"`
		Processes  int   `json:"processes"`
		FileSize   int64 `json:"file_size"`
		OpenFiles  int   `json:"open_files"`
		WallMS     int64 `json:"wall_ms"`
	} `json:"limits"`
}

// Insn is one classic BPF instruction of the seccomp filter.
type Insn struct {
	Code uint16 `json:"c"`
	Jt   uint8  `json:"t"`
	Jf   uint8  `json:"f"`
	K    uint32 `json:"k"`
}

// Status is one line the helper writes on the status pipe.
type Status struct {
	// Error: the sandbox could not be set up; the program never ran.
	Error string `json:"error,omitempty"`
	// Limit: the tree was ended for exceeding this limit.
	Limit string `json:"limit,omitempty"`
	// Exit: every process of the tree is gone and the helper exits with
	// this code, the last thing it writes: what it has left to do (its
	// namespaces' teardown) need not be waited for.
	Exit *int `json:"exit,omitempty"`
}

// systemDirs are the program and library directories a tool may read and
// execute.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// systemEtc is what of /etc a tool may read: what the dynamic loader, the
// C library's name service, TLS clients and Debian's alternatives need.
// Not /etc as a whole: it holds the host's secrets too (shadow, ssh host
// keys, whatever an operator put there).
var systemEtc = []string{
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki",
	"/etc/localtime", "/etc/timezone", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
	"/etc/hosts", "/etc/host.conf", "/etc/services", "/etc/protocols", "/etc/mime.types",
	"/etc/inputrc", "/etc/bash.bashrc", "/etc/profile", "/etc/terminfo", "/etc/magic",
}

// devices are the device files a tool may read and write.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// SystemPaths are the host's paths every sandbox shows, whatever its
// policy: a helper started ahead of a call binds them before the call's
// spec arrives, and the engine checks they are still the same files when
// it hands the call over.
func SystemPaths() []string {
	out := append([]string(nil), systemDirs...)
	out = append(out, systemEtc...)
	return append(out, devices...)
}
