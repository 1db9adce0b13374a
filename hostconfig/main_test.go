package hostconfig

import (
	"os"
	"testing"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// TestMain lets the hosts these tests open confine their tools: the
// sandbox re-executes this binary as its helper.
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}
