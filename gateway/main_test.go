package gateway_test

import (
	"os"
	"testing"

	"github.com/noeta-go/noeta/tools/sandbox"
)

// TestMain lets the test binary be the sandbox's helper: the upstream MCP
// servers run confined, as under engine gateway.
func TestMain(m *testing.M) {
	sandbox.Main()
	os.Exit(m.Run())
}
