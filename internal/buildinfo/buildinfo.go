// Package buildinfo says which build of noeta is running: the module
// version, the commit it was built from and the Go version, read from the
// binary's own build information. The CLI's version verb and the
// noeta_build_info metric print the same.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info is what a binary knows of its build.
type Info struct {
	// Version is the module version ("(devel)" for a build in the
	// repository; a tag such as "v0.4.0" when installed with go install).
	Version string `json:"version"`
	// Revision is the commit, Time its time (RFC 3339) and Modified whether
	// the work tree had changes, when the build was made in a git checkout.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	// GoVersion is the toolchain that built it.
	GoVersion string `json:"go_version"`
}

var read = sync.OnceValue(func() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", GoVersion: "unknown"}
	}
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
})

// Read returns the running binary's build information.
func Read() Info { return read() }

// String is the build on one line: version, the commit (cut to 12, with
// "+changes" when the tree had them), its time, the toolchain and the
// platform.
func (in Info) String() string {
	s := in.Version
	if in.Revision != "" {
		rev := in.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if in.Modified {
			rev += "+changes"
		}
		s += " commit " + rev
		if in.Time != "" {
			s += " (" + in.Time + ")"
		}
	}
	return s + " " + in.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}
