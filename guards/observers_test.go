package guards

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseObservers(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want ObserversConfig
	}{
		{"none", "agents: {a: {}}\n", ObserversConfig{}},
		{"null", "observers:\n", ObserversConfig{}},
		{"audit null", "observers: {audit: ~}\n", ObserversConfig{}},
		{"file", "observers: {audit: {file: audit.jsonl}}\n", ObserversConfig{Audit: &AuditSinkConfig{File: "audit.jsonl"}}},
		{"stdout", "observers: {audit: {stdout: true}}\n", ObserversConfig{Audit: &AuditSinkConfig{Stdout: true}}},
		{"subject", "observers: {audit: {subject: noeta.audit}}\n", ObserversConfig{Audit: &AuditSinkConfig{Subject: "noeta.audit"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Observers(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Observers() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestParseObserversErrors: every mistake of the observers: section is
// refused with its path and line — a section that is not understood must
// never be read as "no observers" (it would drop the audit trail silently).
func TestParseObserversErrors(t *testing.T) {
	tests := []struct {
		name, yaml, path, msg string
		line                  int
	}{
		{"unknown observer", "agents: {}\nobservers:\n  metrics: {listen: x}\n", "observers.metrics", "unknown key", 3},
		{"unknown sink", "observers:\n  audit:\n    kafka: x\n", "observers.audit.kafka", "unknown key", 3},
		{"no sink", "observers:\n  audit: {}\n", "observers.audit", "exactly one sink", 2},
		{"two sinks", "observers:\n  audit: {file: a, stdout: true}\n", "observers.audit", "file and stdout", 2},
		{"stdout false", "observers:\n  audit: {stdout: false}\n", "observers.audit.stdout", "must be true", 2},
		{"stdout not bool", "observers:\n  audit: {stdout: yes please}\n", "observers.audit.stdout", "true or false", 2},
		{"empty file", "observers:\n  audit:\n    file: ''\n", "observers.audit.file", "must not be empty", 3},
		{"file not string", "observers:\n  audit:\n    file: [a]\n", "observers.audit.file", "must be a string", 3},
		{"audit not map", "observers:\n  audit: file.jsonl\n", "observers.audit", "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.yaml))
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a ConfigError", err)
			}
			if ce.Path != tt.path || ce.Line != tt.line || !strings.Contains(ce.Msg, tt.msg) {
				t.Errorf("err = %q (path %q line %d), want path %q line %d and %q", err, ce.Path, ce.Line, tt.path, tt.line, tt.msg)
			}
		})
	}
}

func TestConfigErrorAt(t *testing.T) {
	cfg, err := ParseConfig([]byte("agents: {}\nobservers:\n  audit:\n    file: /nope/a.jsonl\n"))
	if err != nil {
		t.Fatal(err)
	}
	ce := cfg.ErrorAt("observers.audit.file", "cannot open")
	if ce.Line != 4 || ce.Path != "observers.audit.file" {
		t.Errorf("ErrorAt = %+v, want line 4", ce)
	}
}
