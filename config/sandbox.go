package config

import (
	"cmp"
	"math"
	"net"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The largest limits a sandbox: section accepts. Each is far past what a
// tool's process should need and refuses a value that is a mistake (a
// memory_mb written in bytes, a wall_seconds written in milliseconds).
const (
	// maxSandboxSeconds bounds cpu_seconds and wall_seconds: a week.
	maxSandboxSeconds = 7 * 24 * 3600
	// maxSandboxMB bounds memory_mb and file_size_mb: 1 TiB.
	maxSandboxMB = 1 << 20
	// maxSandboxProcesses bounds processes.
	maxSandboxProcesses = 1 << 16
	// maxSandboxOpenFiles bounds open_files: Linux's default ceiling
	// (fs.nr_open).
	maxSandboxOpenFiles = 1 << 20
)

// Sandbox is how the processes tools start (the shell tool's commands,
// every stdio MCP server) run: in a Linux sandbox, with the network, the
// paths and the resources it gives them. It is read from three levels,
// each a Sandbox whose unset members (nil) leave the level above in force:
//
//	sandbox:                         # the defaults: File.Sandbox
//	  enabled: true                  # true by default
//	  network: none                  # none by default; or {allow: ["api.github.com:443", "*.internal:8080"]}
//	  read: [/opt/tools]             # extra read-only paths
//	  write: [/var/cache/build]      # extra read-write paths
//	  limits: {cpu_seconds: 300, memory_mb: 2048, processes: 256,
//	           file_size_mb: 1024, open_files: 1024, wall_seconds: 1800}
//	agents:
//	  coder:                         # File.AgentSandboxes["coder"]; see File.SandboxFor
//	    sandbox: {network: {allow: ["proxy.golang.org:443"]}, limits: {memory_mb: 4096}}
//	mcp_servers:
//	  files:                         # MCPServer.Sandbox; see File.SandboxForMCP
//	    command: [npx, -y, "@modelcontextprotocol/server-filesystem", "."]
//	    sandbox: {write: [/srv/shared]}
//
// A url (streamable HTTP) MCP server starts no process: sandbox: on one is
// an error.
//
// Package config does not import the sandbox (tools/sandbox): the
// composition layer makes its policy from the Sandbox in force.
type Sandbox struct {
	// Enabled is enabled:; nil is not set, and a Sandbox with no level
	// setting it is enabled ([Sandbox.IsEnabled]). enabled: false, at any
	// level, runs the tools concerned unsandboxed: allowed, but warned
	// about at every start ([File.SandboxDisabled] lists where it is set).
	Enabled *bool
	// Network is network:; nil is not set, and a Sandbox with no level
	// setting it has no network.
	Network *SandboxNetwork
	// Read lists absolute, clean paths (files or directories) the processes
	// may read and execute, beside the system's program and library
	// directories. Neither "/" nor a path with ".." is accepted.
	Read []string
	// Write lists absolute, clean paths they may also write, beside the
	// workspace.
	Write []string
	// Limits bound each process and the process tree.
	Limits SandboxLimits
}

// SandboxNetwork is a sandbox's network: none, or the host:port pairs the
// processes may reach through the egress proxy.
type SandboxNetwork struct {
	// None is network: none, or allow: [] (the same thing); Allow is then
	// empty.
	None bool
	// Allow lists host:port pairs, as written: the host a DNS name
	// (letters, digits, '-' and '_' in dot-separated labels), an IP
	// address (an IPv6 one in brackets: "[2001:db8::1]:443") or *.suffix,
	// any name under suffix ("*.internal:8080"); the port 1 to 65535.
	Allow []string
}

// SandboxLimits are the limits: of a sandbox, each nil when not set (the
// sandbox's own default then applies). Each is a positive integer with a
// maximum that refuses a mistake rather than bounds a need.
type SandboxLimits struct {
	// CPUSeconds is the processor time of the whole tree (300 by default);
	// at most a week (604800).
	CPUSeconds *int
	// MemoryMB is, in MiB, the resident memory of the whole tree (2048 by
	// default); at most 1048576 (1 TiB).
	MemoryMB *int
	// Processes is how many processes the tree may hold at once (256 by
	// default); at most 65536.
	Processes *int
	// FileSizeMB is, in MiB, the largest file a process may write (1024 by
	// default); at most 1048576 (1 TiB).
	FileSizeMB *int
	// OpenFiles is how many files each process may hold open (1024 by
	// default); at most 1048576.
	OpenFiles *int
	// WallSeconds is how long the tree may live (1800 by default); at most a
	// week (604800).
	WallSeconds *int
}

// IsEnabled reports whether the processes run sandboxed: unless Enabled
// says false.
func (s Sandbox) IsEnabled() bool { return s.Enabled == nil || *s.Enabled }

// SandboxFor returns the sandbox the processes agent's tools start (the
// shell tool's commands) run in: the top-level sandbox: with the agent's
// sandbox: over it. An agent without one, or not in the file, gets the top
// level. Member by member, a value the agent sets:
//
//   - enabled replaces the top level's;
//   - network replaces the top level's wholly (an agent's allow list is
//     its whole list);
//   - read and write are added to the top level's (a narrower scope naming
//     a path it needs does not repeat the defaults, and cannot take one
//     away);
//   - each limit replaces the top level's one.
//
// A member no level sets stays unset: enabled, no network, no extra paths,
// the sandbox's default limits. The result shares nothing with f.
func (f *File) SandboxFor(agent string) Sandbox {
	return mergeSandbox(f.Sandbox, f.AgentSandboxes[agent])
}

// SandboxForMCP is [File.SandboxFor] for the stdio MCP server named server:
// the top-level sandbox: with the server's over it, by the same rules. A
// server is started once for every agent, so no agent's sandbox: applies
// to it.
func (f *File) SandboxForMCP(server string) Sandbox {
	return mergeSandbox(f.Sandbox, f.MCPServers[server].Sandbox)
}

// SandboxDisabled lists, in the order of the file, the paths of the
// sandbox.enabled keys that say false — sandbox.enabled,
// agents.<name>.sandbox.enabled, mcp_servers.<name>.sandbox.enabled — for
// the warning every start gives; nil when there is none.
func (f *File) SandboxDisabled() []string {
	var out []string
	off := func(s Sandbox) bool { return s.Enabled != nil && !*s.Enabled }
	if off(f.Sandbox) {
		out = append(out, join("sandbox", "enabled"))
	}
	for _, name := range sortedKeys(f.AgentSandboxes) {
		if off(f.AgentSandboxes[name]) {
			out = append(out, join(join(join("agents", name), "sandbox"), "enabled"))
		}
	}
	for _, name := range sortedKeys(f.MCPServers) {
		if off(f.MCPServers[name].Sandbox) {
			out = append(out, join(join(join("mcp_servers", name), "sandbox"), "enabled"))
		}
	}
	slices.SortStableFunc(out, func(a, b string) int {
		return cmp.Compare(f.lineOf(a), f.lineOf(b))
	})
	return out
}

// lineOf is the line of path in the file; MaxInt when not known.
func (f *File) lineOf(path string) int {
	if lc, ok := f.pos[path]; ok {
		return lc[0]
	}
	return math.MaxInt
}

// mergeSandbox returns top with over's set members over it.
func mergeSandbox(top, over Sandbox) Sandbox {
	out := Sandbox{
		Enabled: clonePtr(top.Enabled, over.Enabled),
		Read:    addPaths(top.Read, over.Read),
		Write:   addPaths(top.Write, over.Write),
	}
	nw := top.Network
	if over.Network != nil {
		nw = over.Network
	}
	if nw != nil {
		out.Network = &SandboxNetwork{None: nw.None, Allow: slices.Clone(nw.Allow)}
	}
	out.Limits = SandboxLimits{
		CPUSeconds:  clonePtr(top.Limits.CPUSeconds, over.Limits.CPUSeconds),
		MemoryMB:    clonePtr(top.Limits.MemoryMB, over.Limits.MemoryMB),
		Processes:   clonePtr(top.Limits.Processes, over.Limits.Processes),
		FileSizeMB:  clonePtr(top.Limits.FileSizeMB, over.Limits.FileSizeMB),
		OpenFiles:   clonePtr(top.Limits.OpenFiles, over.Limits.OpenFiles),
		WallSeconds: clonePtr(top.Limits.WallSeconds, over.Limits.WallSeconds),
	}
	return out
}

// clonePtr returns a copy of over when it is set, else of top; nil when
// neither is.
func clonePtr[T any](top, over *T) *T {
	p := top
	if over != nil {
		p = over
	}
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// addPaths returns top's paths then over's, each once; nil when there is
// none.
func addPaths(top, over []string) []string {
	var out []string
	for _, p := range slices.Concat(top, over) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// sandbox reads a sandbox: mapping, at the top level, an agent or an MCP
// server.
func (d *decoder) sandbox(n *yaml.Node, path string) Sandbox {
	var s Sandbox
	f, ok := d.fields(n, path, "enabled", "network", "read", "write", "limits")
	if !ok && f == nil {
		return s
	}
	ep := join(path, "enabled")
	if e := d.enter(f["enabled"], ep); !isNull(e) {
		var b bool
		if e.Kind != yaml.ScalarNode || e.ShortTag() != "!!bool" || e.Decode(&b) != nil {
			d.errs.addf(ep, "must be true or false, not %s", kindName(e))
		} else {
			s.Enabled = &b
		}
	}
	s.Network = d.sandboxNetwork(f["network"], join(path, "network"))
	s.Read, _ = d.checkedStrList(f["read"], join(path, "read"), checkSandboxPath)
	s.Write, _ = d.checkedStrList(f["write"], join(path, "write"), checkSandboxPath)
	if ln, ok := f["limits"]; ok {
		s.Limits = d.sandboxLimits(ln, join(path, "limits"))
	}
	return s
}

const sandboxNetworkHow = "none or {allow: [host:port, ...]}"

// sandboxNetwork reads network: none or {allow: [...]}; nil when absent.
func (d *decoder) sandboxNetwork(n *yaml.Node, path string) *SandboxNetwork {
	if n = d.enter(n, path); isNull(n) {
		return nil
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		if n.Value == "none" {
			return &SandboxNetwork{None: true}
		}
		d.errs.addf(path, "must be %s, not %q", sandboxNetworkHow, n.Value)
		return nil
	case n.Kind == yaml.MappingNode:
	default:
		d.errs.addf(path, "must be %s, not %s", sandboxNetworkHow, kindName(n))
		return nil
	}
	f, ok := d.fields(n, path, "allow")
	if !ok {
		return nil // an unknown key (reported) is likely a misspelt allow
	}
	ap := join(path, "allow")
	if isNull(f["allow"]) {
		d.errs.add(ap, "required: the host:port pairs the processes may reach (allow: [] or network: none for no network)")
		return nil
	}
	list, ok := d.checkedStrList(f["allow"], ap, checkAllowEntry)
	if !ok {
		return nil
	}
	if len(list) == 0 {
		return &SandboxNetwork{None: true}
	}
	return &SandboxNetwork{Allow: list}
}

const hostPortHow = "want host:port, the host a DNS name, an IP address (IPv6 in brackets) or *.suffix, the port 1 to 65535"

// checkAllowEntry returns what is wrong with an allow entry, "" when nothing.
func checkAllowEntry(s string) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || port == "" {
		return strconv.Quote(s) + ": " + hostPortHow
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || strconv.Itoa(p) != port {
		return strconv.Quote(s) + ": the port must be from 1 to 65535"
	}
	bad := strconv.Quote(s) + ": the host " + strconv.Quote(host) + " is not a DNS name, an IP address (IPv6 in brackets) or *.suffix"
	if strings.HasPrefix(s, "[") {
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() || a.Zone() != "" {
			return bad
		}
		return ""
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return ""
	}
	if !isDNSName(strings.TrimPrefix(host, "*.")) {
		return bad
	}
	return ""
}

// isDNSName reports a host name: dot-separated labels of 1 to 63 letters,
// digits, '-' and '_', none starting or ending with '-', 253 characters in
// all, the last label not all digits (1.2.3.256 is no name).
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range []byte(l) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != ""
}

// checkedStrList reads a list of strings, each checked by check (which
// returns what is wrong with it, "" when nothing), and reports each mistake
// at the entry's index. ok is false when an entry was refused; absent (null)
// is nil, true.
func (d *decoder) checkedStrList(n *yaml.Node, path string, check func(string) string) (list []string, ok bool) {
	if n = d.enter(n, path); isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		d.errs.addf(path, "must be a list of strings, not %s", kindName(n))
		return nil, false
	}
	out := make([]string, 0, len(n.Content))
	ok = true
	for i, it := range n.Content {
		ip := index(path, i)
		s, sok := d.str(it, ip)
		if !sok {
			if isNull(it) {
				d.errs.add(ip, "must be a string, not null")
			}
			ok = false
			continue
		}
		if msg := check(s); msg != "" {
			d.errs.add(ip, msg)
			ok = false
			continue
		}
		out = append(out, s)
	}
	return out, ok
}

// checkSandboxPath returns what is wrong with a read or write entry, ""
// when nothing.
func checkSandboxPath(p string) string {
	switch {
	case p == "":
		return "must be an absolute path, not empty"
	case strings.ContainsRune(p, 0):
		return strconv.Quote(p) + ": must not hold a NUL byte"
	case !strings.HasPrefix(p, "/"):
		return strconv.Quote(p) + ": must be an absolute path"
	case slices.Contains(strings.Split(p, "/"), ".."):
		return strconv.Quote(p) + ": must not have .. components"
	case path.Clean(p) == "/":
		return strconv.Quote(p) + " is the whole file system; name the directories the tools need"
	case path.Clean(p) != p:
		return strconv.Quote(p) + ": must be a clean path: write " + strconv.Quote(path.Clean(p))
	}
	return ""
}

// sandboxLimits reads limits:.
func (d *decoder) sandboxLimits(n *yaml.Node, path string) SandboxLimits {
	var l SandboxLimits
	f, ok := d.fields(n, path, "cpu_seconds", "memory_mb", "processes", "file_size_mb", "open_files", "wall_seconds")
	if !ok && f == nil {
		return l
	}
	for _, k := range []struct {
		key  string
		max  int
		what string
		dst  **int
	}{
		{"cpu_seconds", maxSandboxSeconds, "a week", &l.CPUSeconds},
		{"memory_mb", maxSandboxMB, "1 TiB", &l.MemoryMB},
		{"processes", maxSandboxProcesses, "", &l.Processes},
		{"file_size_mb", maxSandboxMB, "1 TiB", &l.FileSizeMB},
		{"open_files", maxSandboxOpenFiles, "", &l.OpenFiles},
		{"wall_seconds", maxSandboxSeconds, "a week", &l.WallSeconds},
	} {
		kp := join(path, k.key)
		v, _ := d.integer(f[k.key], kp)
		switch {
		case v == nil:
		case *v < 1:
			d.errs.addf(kp, "must be a positive integer, not %d", *v)
		case *v > k.max && k.what != "":
			d.errs.addf(kp, "must be at most %d (%s), not %d", k.max, k.what, *v)
		case *v > k.max:
			d.errs.addf(kp, "must be at most %d, not %d", k.max, *v)
		default:
			*k.dst = v
		}
	}
	return l
}
