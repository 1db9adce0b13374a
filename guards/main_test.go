package guards_test

import (
	"os"
	"testing"

	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/guards"
)

// TestMain gives the tests of package guards that start from YAML the one
// decoder of noeta.yaml, package config's, which they cannot import
// themselves (config imports guards).
func TestMain(m *testing.M) {
	guards.SetTestParse(func(data []byte) (*guards.Config, error) {
		f, err := config.Parse("", data)
		if err != nil {
			return nil, err
		}
		return f.Governance, nil
	})
	os.Exit(m.Run())
}
