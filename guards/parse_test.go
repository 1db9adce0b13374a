package guards

import "fmt"

// testParse is package config's decoder of noeta.yaml, for the tests of this
// package that build a Config from YAML. config imports guards, so a test of
// package guards cannot import it; the external test package hands it over
// in TestMain (main_test.go), before any test runs.
var testParse func(data []byte) (*Config, error)

// SetTestParse is how TestMain hands the decoder over.
func SetTestParse(parse func(data []byte) (*Config, error)) { testParse = parse }

// parseConfig decodes a noeta.yaml document with package config's decoder.
func parseConfig(data []byte) (*Config, error) {
	if testParse == nil {
		return nil, fmt.Errorf("guards tests: no decoder: TestMain (main_test.go) sets it")
	}
	return testParse(data)
}
