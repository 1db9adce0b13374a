package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// sandboxConfig is the sandbox example of the issue, verbatim.
const sandboxConfig = `
sandbox:                       # top level: the defaults
  enabled: true                # default true; false runs tools unsandboxed (warned about at every start)
  network: none                # default none; or {allow: ["api.github.com:443", "*.internal:8080"]}
  read: [/opt/tools]           # extra read-only paths (absolute), beside the system's program and library dirs
  write: [/var/cache/build]    # extra read-write paths (absolute), beside the workspace
  limits:
    cpu_seconds: 300           # per process
    memory_mb: 2048            # per process address space and the tree's resident memory
    processes: 256
    file_size_mb: 1024
    open_files: 1024
    wall_seconds: 1800
agents:
  coder:
    sandbox: {network: {allow: ["proxy.golang.org:443"]}, limits: {memory_mb: 4096}}
mcp_servers:
  files:
    command: [npx, -y, "@modelcontextprotocol/server-filesystem", "."]
    sandbox: {write: [/srv/shared]}
`

func ptr[T any](v T) *T { return &v }

func TestParseSandbox(t *testing.T) {
	t.Parallel()
	f, err := Parse("noeta.yaml", []byte(sandboxConfig))
	if err != nil {
		t.Fatal(err)
	}
	top := Sandbox{
		Enabled: ptr(true),
		Network: &SandboxNetwork{None: true},
		Read:    []string{"/opt/tools"},
		Write:   []string{"/var/cache/build"},
		Limits: SandboxLimits{CPUSeconds: ptr(300), MemoryMB: ptr(2048), Processes: ptr(256), FileSizeMB: ptr(1024),
			OpenFiles: ptr(1024), WallSeconds: ptr(1800)},
	}
	if !reflect.DeepEqual(f.Sandbox, top) {
		t.Errorf("Sandbox = %+v\nwant %+v", f.Sandbox, top)
	}
	coder := Sandbox{Network: &SandboxNetwork{Allow: []string{"proxy.golang.org:443"}}, Limits: SandboxLimits{MemoryMB: ptr(4096)}}
	if want := map[string]Sandbox{"coder": coder}; !reflect.DeepEqual(f.AgentSandboxes, want) {
		t.Errorf("AgentSandboxes = %+v\nwant %+v", f.AgentSandboxes, want)
	}
	if got, want := f.MCPServers["files"].Sandbox, (Sandbox{Write: []string{"/srv/shared"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("files' Sandbox = %+v\nwant %+v", got, want)
	}

	// coder: its network wholly, its memory_mb, the rest from the top.
	wantCoder := top
	wantCoder.Network = coder.Network
	wantCoder.Limits.MemoryMB = ptr(4096)
	if got := f.SandboxFor("coder"); !reflect.DeepEqual(got, wantCoder) || !got.IsEnabled() {
		t.Errorf("SandboxFor(coder) = %+v\nwant %+v", got, wantCoder)
	}
	// Another agent, or one not in the file: the top level.
	if got := f.SandboxFor("nobody"); !reflect.DeepEqual(got, top) {
		t.Errorf("SandboxFor(nobody) = %+v\nwant %+v", got, top)
	}
	// files: its write path added to the top level's.
	wantFiles := top
	wantFiles.Write = []string{"/var/cache/build", "/srv/shared"}
	if got := f.SandboxForMCP("files"); !reflect.DeepEqual(got, wantFiles) {
		t.Errorf("SandboxForMCP(files) = %+v\nwant %+v", got, wantFiles)
	}
	if got := f.SandboxDisabled(); got != nil {
		t.Errorf("SandboxDisabled = %q, want none", got)
	}
}

// TestSandboxDefaults: with no sandbox: anywhere (or an empty one), the
// settings in force are the zero Sandbox: enabled, no network, no extra
// paths, every limit unset (the sandbox's defaults).
func TestSandboxDefaults(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		"",
		"agents:\n  a: {tools: [echo]}\nmcp_servers:\n  m: {command: [x]}\n",
		"sandbox:\nagents:\n  a: {sandbox: }\nmcp_servers:\n  m: {command: [x], sandbox: }\n",
		"sandbox: {}\nagents:\n  a: {sandbox: {}}\nmcp_servers:\n  m: {command: [x], sandbox: {}}\n",
		"sandbox: {read: [], write: [], limits: {}}\n",
	} {
		f, err := Parse("", []byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		for _, s := range []Sandbox{f.SandboxFor("a"), f.SandboxFor("b"), f.SandboxForMCP("m"), f.SandboxForMCP("n")} {
			if !reflect.DeepEqual(s, Sandbox{}) || !s.IsEnabled() {
				t.Errorf("%q: %+v, want the zero Sandbox", doc, s)
			}
		}
		if got := f.SandboxDisabled(); got != nil {
			t.Errorf("%q: SandboxDisabled = %q", doc, got)
		}
	}
	if !(Sandbox{}).IsEnabled() || !(Sandbox{Enabled: ptr(true)}).IsEnabled() || (Sandbox{Enabled: ptr(false)}).IsEnabled() {
		t.Error("IsEnabled: want nil and true enabled, false not")
	}
}

// TestParseSandboxForms: each form a key may take, as the top level reads it.
func TestParseSandboxForms(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, yaml string
		want       Sandbox
	}{
		{"enabled false", "{enabled: false}", Sandbox{Enabled: ptr(false)}},
		{"network none", "{network: none}", Sandbox{Network: &SandboxNetwork{None: true}}},
		{"allow nothing is none", "{network: {allow: []}}", Sandbox{Network: &SandboxNetwork{None: true}}},
		{"network null is not set", "{network: ~}", Sandbox{}},
		{"allow", `{network: {allow: ["api.github.com:443", "*.internal:8080", "10.0.0.1:5432", "[2001:db8::1]:443",
			"[::ffff:10.0.0.1]:80", localhost:65535, my_service:1, "xn--bcher-kva.example:8443", "a-b.C0M:22"]}}`,
			Sandbox{Network: &SandboxNetwork{Allow: []string{"api.github.com:443", "*.internal:8080", "10.0.0.1:5432",
				"[2001:db8::1]:443", "[::ffff:10.0.0.1]:80", "localhost:65535", "my_service:1", "xn--bcher-kva.example:8443", "a-b.C0M:22"}}}},
		{"paths", "{read: [/opt/tools, /usr/share/dict/words], write: [/var/cache/build, /tmp]}",
			Sandbox{Read: []string{"/opt/tools", "/usr/share/dict/words"}, Write: []string{"/var/cache/build", "/tmp"}}},
		{"the largest limits", "{limits: {cpu_seconds: 604800, memory_mb: 1048576, processes: 65536, file_size_mb: 1048576, open_files: 1048576, wall_seconds: 604800}}",
			Sandbox{Limits: SandboxLimits{CPUSeconds: ptr(604800), MemoryMB: ptr(1 << 20), Processes: ptr(65536),
				FileSizeMB: ptr(1 << 20), OpenFiles: ptr(1 << 20), WallSeconds: ptr(604800)}}},
		{"the smallest limits", "{limits: {cpu_seconds: 1, memory_mb: 1, processes: 1, file_size_mb: 1, open_files: 1, wall_seconds: 1}}",
			Sandbox{Limits: SandboxLimits{CPUSeconds: ptr(1), MemoryMB: ptr(1), Processes: ptr(1), FileSizeMB: ptr(1), OpenFiles: ptr(1), WallSeconds: ptr(1)}}},
		{"one limit", "{limits: {open_files: 64}}", Sandbox{Limits: SandboxLimits{OpenFiles: ptr(64)}}},
		{"anchors", "&s {read: [/a]}\nagents:\n  a: {sandbox: *s}", Sandbox{Read: []string{"/a"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Parse("", []byte("sandbox: "+tt.yaml+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(f.Sandbox, tt.want) {
				t.Errorf("Sandbox = %+v\nwant %+v", f.Sandbox, tt.want)
			}
		})
	}
}

// TestParseSandboxBad: each mistake is one error, at the path of the bad
// field and its line.
func TestParseSandboxBad(t *testing.T) {
	t.Parallel()
	const hp = "want host:port, the host a DNS name, an IP address (IPv6 in brackets) or *.suffix, the port 1 to 65535"
	const notHost = "is not a DNS name, an IP address (IPv6 in brackets) or *.suffix"
	allow := func(entry string) string {
		return "sandbox:\n  network: {allow: [\"a.example:1\", \"" + entry + "\"]}\n"
	}
	badHost := func(entry, host string) string {
		return `sandbox.network.allow[1]: "` + entry + `": the host "` + host + `" ` + notHost
	}
	for _, tt := range []struct{ name, yaml, want string }{
		// Keys and types.
		{"unknown key", "sandbox: {enable: true}\n", "sandbox.enable: unknown key (known: enabled, network, read, write, limits)"},
		{"not a mapping", "sandbox: [read]\n", "sandbox: must be a mapping, not a sequence"},
		{"enabled a string", "sandbox: {enabled: \"no\"}\n", "sandbox.enabled: must be true or false, not a string"},
		{"enabled a number", "sandbox: {enabled: 0}\n", "sandbox.enabled: must be true or false, not an integer"},
		{"unknown limit", "sandbox:\n  limits: {memory: 1}\n",
			"sandbox.limits.memory: unknown key (known: cpu_seconds, memory_mb, processes, file_size_mb, open_files, wall_seconds)"},
		{"unknown network key", "sandbox:\n  network: {deny: [x]}\n", "sandbox.network.deny: unknown key (known: allow)"},

		// network.
		{"network all", "sandbox: {network: all}\n", `sandbox.network: must be none or {allow: [host:port, ...]}, not "all"`},
		{"network a bool", "sandbox: {network: false}\n", "sandbox.network: must be none or {allow: [host:port, ...]}, not a boolean"},
		{"network a list", "sandbox: {network: [\"a:1\"]}\n", "sandbox.network: must be none or {allow: [host:port, ...]}, not a sequence"},
		{"network without allow", "sandbox: {network: {}}\n",
			"sandbox.network.allow: required: the host:port pairs the processes may reach (allow: [] or network: none for no network)"},
		{"allow a string", "sandbox: {network: {allow: \"a:1\"}}\n", "sandbox.network.allow: must be a list of strings, not a string"},
		{"allow entry null", "sandbox: {network: {allow: [\"a:1\", ~]}}\n", "sandbox.network.allow[1]: must be a string, not null"},
		{"allow entry a number", "sandbox: {network: {allow: [\"a:1\", 443]}}\n", "sandbox.network.allow[1]: must be a string, not an integer"},
		{"no port", allow("x"), `sandbox.network.allow[1]: "x": ` + hp},
		{"empty port", allow("x:"), `sandbox.network.allow[1]: "x:": ` + hp},
		{"no host", allow(":443"), `sandbox.network.allow[1]: ":443": ` + hp},
		{"bare IPv6", allow("::1:443"), `sandbox.network.allow[1]: "::1:443": ` + hp},
		{"bracketed, no port", allow("[::1]"), `sandbox.network.allow[1]: "[::1]": ` + hp},
		{"port 0", allow("a.example:0"), `sandbox.network.allow[1]: "a.example:0": the port must be from 1 to 65535`},
		{"port too big", allow("a.example:65536"), `sandbox.network.allow[1]: "a.example:65536": the port must be from 1 to 65535`},
		{"port with a zero", allow("a.example:0443"), `sandbox.network.allow[1]: "a.example:0443": the port must be from 1 to 65535`},
		{"port a name", allow("a.example:https"), `sandbox.network.allow[1]: "a.example:https": the port must be from 1 to 65535`},
		{"port a wildcard", allow("a.example:*"), `sandbox.network.allow[1]: "a.example:*": the port must be from 1 to 65535`},
		{"IPv4 in brackets", allow("[10.0.0.1]:80"), `sandbox.network.allow[1]: "[10.0.0.1]:80": the host "10.0.0.1" ` + notHost},
		{"IPv6 zone", allow("[fe80::1%eth0]:80"), `sandbox.network.allow[1]: "[fe80::1%eth0]:80": the host "fe80::1%eth0" ` + notHost},
		{"name in brackets", allow("[a.example]:80"), `sandbox.network.allow[1]: "[a.example]:80": the host "a.example" ` + notHost},
		{"bad IPv4", allow("10.0.0.256:80"), `sandbox.network.allow[1]: "10.0.0.256:80": the host "10.0.0.256" ` + notHost},
		{"empty label", allow("a..example:80"), badHost("a..example:80", "a..example")},
		{"trailing dot", allow("a.example.:80"), badHost("a.example.:80", "a.example.")},
		{"leading hyphen", allow("-a.example:80"), badHost("-a.example:80", "-a.example")},
		{"a space", allow("a example:80"), badHost("a example:80", "a example")},
		{"bare star", allow("*:80"), badHost("*:80", "*")},
		{"star inside", allow("a.*.example:80"), badHost("a.*.example:80", "a.*.example")},
		{"star in a label", allow("*a.example:80"), badHost("*a.example:80", "*a.example")},
		{"two stars", allow("*.*.example:80"), badHost("*.*.example:80", "*.*.example")},
		{"long label", allow(strings.Repeat("a", 64) + ".example:80"),
			badHost(strings.Repeat("a", 64)+".example:80", strings.Repeat("a", 64)+".example")},
		{"a label of 63", "sandbox: {network: {allow: [\"" + strings.Repeat("a", 63) + ".example:80\", x]}}\n", `sandbox.network.allow[1]: "x": ` + hp},
		{"a URL", allow("https://a.example:443"), `sandbox.network.allow[1]: "https://a.example:443": ` + hp},

		// read and write.
		{"relative", "sandbox: {read: [opt/tools]}\n", `sandbox.read[0]: "opt/tools": must be an absolute path`},
		{"dot relative", "sandbox: {write: [/ok, ./cache]}\n", `sandbox.write[1]: "./cache": must be an absolute path`},
		{"dot dot", "sandbox: {write: [/var/../etc]}\n", `sandbox.write[0]: "/var/../etc": must not have .. components`},
		{"dot dot at the end", "sandbox: {read: [/a, /b, /opt/..]}\n", `sandbox.read[2]: "/opt/..": must not have .. components`},
		{"empty", "sandbox: {read: [\"\"]}\n", `sandbox.read[0]: must be an absolute path, not empty`},
		{"root", "sandbox: {write: [/]}\n", `sandbox.write[0]: "/" is the whole file system; name the directories the tools need`},
		{"root, twice", "sandbox: {read: [//]}\n", `sandbox.read[0]: "//" is the whole file system; name the directories the tools need`},
		{"trailing slash", "sandbox: {read: [/opt/tools/]}\n", `sandbox.read[0]: "/opt/tools/": must be a clean path: write "/opt/tools"`},
		{"double slash", "sandbox: {write: [/var//cache]}\n", `sandbox.write[0]: "/var//cache": must be a clean path: write "/var/cache"`},
		{"dot", "sandbox: {write: [/var/./cache]}\n", `sandbox.write[0]: "/var/./cache": must be a clean path: write "/var/cache"`},
		{"NUL", "sandbox: {read: [\"/a\\0b\"]}\n", `sandbox.read[0]: "/a\x00b": must not hold a NUL byte`},
		{"not a list", "sandbox: {read: /opt}\n", "sandbox.read: must be a list of strings, not a string"},
		{"entry not a string", "sandbox: {read: [/a, 1]}\n", "sandbox.read[1]: must be a string, not an integer"},

		// limits.
		{"memory 0", "sandbox:\n  limits: {memory_mb: 0}\n", "sandbox.limits.memory_mb: must be a positive integer, not 0"},
		{"cpu negative", "sandbox:\n  limits: {cpu_seconds: -1}\n", "sandbox.limits.cpu_seconds: must be a positive integer, not -1"},
		{"memory too big", "sandbox:\n  limits: {memory_mb: 1048577}\n", "sandbox.limits.memory_mb: must be at most 1048576 (1 TiB), not 1048577"},
		{"memory in bytes", "sandbox:\n  limits: {memory_mb: 2147483648}\n", "sandbox.limits.memory_mb: must be at most 1048576 (1 TiB), not 2147483648"},
		{"cpu over a week", "sandbox:\n  limits: {cpu_seconds: 604801}\n", "sandbox.limits.cpu_seconds: must be at most 604800 (a week), not 604801"},
		{"wall over a week", "sandbox:\n  limits: {wall_seconds: 1800000}\n", "sandbox.limits.wall_seconds: must be at most 604800 (a week), not 1800000"},
		{"file size too big", "sandbox:\n  limits: {file_size_mb: 2000000}\n", "sandbox.limits.file_size_mb: must be at most 1048576 (1 TiB), not 2000000"},
		{"processes too many", "sandbox:\n  limits: {processes: 65537}\n", "sandbox.limits.processes: must be at most 65536, not 65537"},
		{"open files too many", "sandbox:\n  limits: {open_files: 1048577}\n", "sandbox.limits.open_files: must be at most 1048576, not 1048577"},
		{"limit a string", "sandbox:\n  limits: {processes: many}\n", "sandbox.limits.processes: must be an integer, not a string"},
		{"limit a fraction", "sandbox:\n  limits: {memory_mb: 1.5}\n", "sandbox.limits.memory_mb: must be an integer, not a number"},
		{"limits a number", "sandbox:\n  limits: 5\n", "sandbox.limits: must be a mapping, not an integer"},

		// Agents and MCP servers: the same checks, at their paths.
		{"agent's allow", "agents:\n  coder:\n    sandbox: {network: {allow: [\"a.example:1\", x]}}\n",
			`agents.coder.sandbox.network.allow[1]: "x": ` + hp},
		{"agent's limit", "agents:\n  coder:\n    sandbox:\n      limits: {memory_mb: 0}\n",
			"agents.coder.sandbox.limits.memory_mb: must be a positive integer, not 0"},
		{"agent's unknown key", "agents:\n  coder:\n    sandbox: {limit: {}}\n", "agents.coder.sandbox.limit: unknown key"},
		{"quoted agent", "agents:\n  \"my agent\":\n    sandbox: {read: [x]}\n", `agents."my agent".sandbox.read[0]: "x": must be an absolute path`},
		{"server's write", "mcp_servers:\n  files: {command: [x], sandbox: {write: [srv]}}\n",
			`mcp_servers.files.sandbox.write[0]: "srv": must be an absolute path`},
		{"server's enabled", "mcp_servers:\n  files: {command: [x], sandbox: {enabled: off!}}\n",
			"mcp_servers.files.sandbox.enabled: must be true or false, not a string"},
		{"sandbox on a url server", "mcp_servers:\n  issues: {url: \"http://h/mcp\", sandbox: {network: none}}\n",
			"mcp_servers.issues.sandbox: a url server starts no process to sandbox; sandbox is for a command"},
		{"an empty sandbox on a url server", "mcp_servers:\n  issues:\n    url: \"http://h/mcp\"\n    sandbox: {}\n",
			"mcp_servers.issues.sandbox: a url server starts no process to sandbox; sandbox is for a command (line 4)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := Parse("noeta.yaml", []byte(tt.yaml))
			if err == nil || f != nil {
				t.Fatalf("no error, or a File with the error")
			}
			if !strings.Contains(err.Error(), "noeta.yaml: "+tt.want) || strings.Count(err.Error(), "\n") != 0 {
				t.Fatalf("got %v\nwant one error containing %q", err, tt.want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Line == 0 {
				t.Errorf("%v: want a *Error with a line", err)
			}
		})
	}
}

// TestSandboxMerge: the rules by which an agent's or a server's sandbox:
// goes over the top level's.
func TestSandboxMerge(t *testing.T) {
	t.Parallel()
	const top = `
sandbox:
  network: {allow: ["a.example:443", "b.example:443"]}
  read: [/opt/tools, /usr/share/x]
  write: [/var/cache/build]
  limits: {cpu_seconds: 300, memory_mb: 2048}
`
	topBox := Sandbox{
		Network: &SandboxNetwork{Allow: []string{"a.example:443", "b.example:443"}},
		Read:    []string{"/opt/tools", "/usr/share/x"},
		Write:   []string{"/var/cache/build"},
		Limits:  SandboxLimits{CPUSeconds: ptr(300), MemoryMB: ptr(2048)},
	}
	with := func(change func(*Sandbox)) Sandbox {
		s := topBox
		s.Limits = SandboxLimits{CPUSeconds: ptr(300), MemoryMB: ptr(2048)}
		change(&s)
		return s
	}
	for _, tt := range []struct {
		name, over string // the agent's and the server's sandbox:
		want       Sandbox
	}{
		{"nothing set", "{}", topBox},
		{"enabled replaces", "{enabled: false}", with(func(s *Sandbox) { s.Enabled = ptr(false) })},
		{"network none replaces an allow list", "{network: none}", with(func(s *Sandbox) { s.Network = &SandboxNetwork{None: true} })},
		{"allow [] replaces an allow list", "{network: {allow: []}}", with(func(s *Sandbox) { s.Network = &SandboxNetwork{None: true} })},
		{"an allow list replaces wholly", `{network: {allow: ["c.example:80"]}}`,
			with(func(s *Sandbox) { s.Network = &SandboxNetwork{Allow: []string{"c.example:80"}} })},
		{"read is added", "{read: [/srv/data, /opt/tools]}",
			with(func(s *Sandbox) { s.Read = []string{"/opt/tools", "/usr/share/x", "/srv/data"} })},
		{"write is added", "{write: [/srv/shared]}",
			with(func(s *Sandbox) { s.Write = []string{"/var/cache/build", "/srv/shared"} })},
		{"an empty list takes nothing away", "{read: [], write: []}", topBox},
		{"a limit replaces its own", "{limits: {memory_mb: 4096, processes: 64}}",
			with(func(s *Sandbox) { s.Limits.MemoryMB, s.Limits.Processes = ptr(4096), ptr(64) })},
		{"every limit", "{limits: {cpu_seconds: 1, memory_mb: 2, processes: 3, file_size_mb: 4, open_files: 5, wall_seconds: 6}}",
			with(func(s *Sandbox) {
				s.Limits = SandboxLimits{CPUSeconds: ptr(1), MemoryMB: ptr(2), Processes: ptr(3), FileSizeMB: ptr(4), OpenFiles: ptr(5), WallSeconds: ptr(6)}
			})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc := top + "agents:\n  a:\n    sandbox: " + tt.over + "\n  other: {tools: [echo]}\n" +
				"mcp_servers:\n  m:\n    command: [x]\n    sandbox: " + tt.over + "\n  plain: {command: [y]}\n"
			f, err := Parse("", []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := f.SandboxFor("a"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SandboxFor(a) = %+v\nwant %+v", got, tt.want)
			}
			if got := f.SandboxForMCP("m"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SandboxForMCP(m) = %+v\nwant %+v", got, tt.want)
			}
			// The others, and the top level itself, are untouched.
			for _, got := range []Sandbox{f.SandboxFor("other"), f.SandboxForMCP("plain"), f.Sandbox} {
				if !reflect.DeepEqual(got, topBox) {
					t.Errorf("got %+v\nwant the top level %+v", got, topBox)
				}
			}
		})
	}

	// Only the top level sets something: a lower level's set member with
	// nothing above it is taken as it is.
	f, err := Parse("", []byte("agents:\n  a:\n    sandbox: {enabled: true, read: [/x], limits: {wall_seconds: 60}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Sandbox{Enabled: ptr(true), Read: []string{"/x"}, Limits: SandboxLimits{WallSeconds: ptr(60)}}
	if got := f.SandboxFor("a"); !reflect.DeepEqual(got, want) {
		t.Errorf("SandboxFor(a) = %+v\nwant %+v", got, want)
	}
}

// TestSandboxForSharesNothing: the settings in force are the caller's; a
// change to them does not reach the File.
func TestSandboxForSharesNothing(t *testing.T) {
	t.Parallel()
	f, err := Parse("", []byte(sandboxConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Sandbox{f.SandboxFor("coder"), f.SandboxFor("x"), f.SandboxForMCP("files")} {
		*s.Enabled = false
		s.Network.None = false
		s.Network.Allow = append(s.Network.Allow[:0:0], "evil.example:1")
		s.Read[0] = "/"
		s.Write[0] = "/"
		*s.Limits.MemoryMB = 1
		*s.Limits.CPUSeconds = 1
	}
	g, _ := Parse("", []byte(sandboxConfig))
	if !reflect.DeepEqual(f.Sandbox, g.Sandbox) || !reflect.DeepEqual(f.AgentSandboxes, g.AgentSandboxes) ||
		!reflect.DeepEqual(f.MCPServers, g.MCPServers) {
		t.Errorf("the File changed:\n%+v\n%+v", f.Sandbox, f.AgentSandboxes)
	}
	// The same through the slices of a network allow list.
	coder := f.SandboxFor("coder")
	coder.Network.Allow[0] = "evil.example:1"
	if f.AgentSandboxes["coder"].Network.Allow[0] != "proxy.golang.org:443" {
		t.Error("the agent's allow list changed")
	}
}

// TestSandboxDisabled lists, in the order of the file, where enabled:
// false is said; enabled: true is not listed.
func TestSandboxDisabled(t *testing.T) {
	t.Parallel()
	f, err := Parse("", []byte(`
mcp_servers:
  zeta: {command: [x], sandbox: {enabled: false}}
  alpha: {command: [x], sandbox: {enabled: true}}
agents:
  b: {sandbox: {enabled: false}}
  "my agent": {sandbox: {enabled: false}}
  a: {sandbox: {read: [/x]}}
sandbox: {enabled: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"mcp_servers.zeta.sandbox.enabled", "agents.b.sandbox.enabled", `agents."my agent".sandbox.enabled`, "sandbox.enabled"}
	if got := f.SandboxDisabled(); !reflect.DeepEqual(got, want) {
		t.Errorf("SandboxDisabled = %q\nwant %q", got, want)
	}
	// The top level's false holds where no lower level says otherwise.
	if f.SandboxFor("a").IsEnabled() || f.SandboxFor("b").IsEnabled() || !f.SandboxForMCP("alpha").IsEnabled() || f.SandboxForMCP("zeta").IsEnabled() {
		t.Error("IsEnabled: want only alpha enabled")
	}
	// A File built by hand (no positions): sorted by level, then name.
	h := &File{Sandbox: Sandbox{Enabled: ptr(false)}, AgentSandboxes: map[string]Sandbox{"b": {Enabled: ptr(false)}, "a": {Enabled: ptr(false)}}}
	want = []string{"sandbox.enabled", "agents.a.sandbox.enabled", "agents.b.sandbox.enabled"}
	if got := h.SandboxDisabled(); !reflect.DeepEqual(got, want) {
		t.Errorf("SandboxDisabled (by hand) = %q\nwant %q", got, want)
	}
}
