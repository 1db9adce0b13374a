package buildinfo

import (
	"runtime"
	"testing"
)

// TestRead: a test binary has build information: a version (the main
// module's, or "(devel)") and the toolchain that built it.
func TestRead(t *testing.T) {
	in := Read()
	if in.Version == "" || in.Version == "unknown" {
		t.Errorf("version %q", in.Version)
	}
	if in.GoVersion != runtime.Version() {
		t.Errorf("go version %q, want %q", in.GoVersion, runtime.Version())
	}
}
