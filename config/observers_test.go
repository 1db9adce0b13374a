package config

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
		want Observers
	}{
		{"none", "agents: {a: {}}\n", Observers{}},
		{"null", "observers:\n", Observers{}},
		{"audit null", "observers: {audit: ~}\n", Observers{}},
		{"file", "observers: {audit: {file: audit.jsonl}}\n", Observers{Audit: &Audit{File: "audit.jsonl"}}},
		{"stdout", "observers: {audit: {stdout: true}}\n", Observers{Audit: &Audit{Stdout: true}}},
		{"subject", "observers: {audit: {subject: noeta.audit}}\n", Observers{Audit: &Audit{Subject: "noeta.audit"}}},
		{"metrics", "observers: {metrics: {listen: \"127.0.0.1:9464\"}}\n", Observers{Metrics: &Metrics{Listen: "127.0.0.1:9464"}}},
		{"metrics on every interface", "observers: {metrics: {listen: \":0\"}}\n", Observers{Metrics: &Metrics{Listen: ":0"}}},
		{"trace, grpc by default", "observers: {trace: {otlp_endpoint: \"localhost:4317\", insecure: true}}\n",
			Observers{Trace: &Trace{Endpoint: "localhost:4317", Protocol: TraceGRPC, Insecure: true}}},
		{"trace over http", "observers: {trace: {otlp_endpoint: \"https://otel.example:4318/v1/traces\", protocol: http}}\n",
			Observers{Trace: &Trace{Endpoint: "https://otel.example:4318/v1/traces", Protocol: TraceHTTP}}},
		{"fanout on the host's listener", "observers: {fanout: {}}\n", Observers{Fanout: &Fanout{}}},
		{"fanout on its own", "observers: {fanout: {listen: \"[::1]:8081\"}}\n", Observers{Fanout: &Fanout{Listen: "[::1]:8081"}}},
		{"all four", "observers:\n  audit: {file: a.jsonl}\n  metrics: {listen: \":9464\"}\n  trace: {otlp_endpoint: \"c:4317\"}\n  fanout: {}\n",
			Observers{Audit: &Audit{File: "a.jsonl"}, Metrics: &Metrics{Listen: ":9464"}, Trace: &Trace{Endpoint: "c:4317", Protocol: TraceGRPC}, Fanout: &Fanout{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := f.Observers; !reflect.DeepEqual(got, tt.want) {
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
		{"unknown observer", "agents: {}\nobservers:\n  logs: {listen: x}\n", "observers.logs", "unknown key (known: audit, metrics, trace, fanout)", 3},
		{"metrics without listen", "observers:\n  metrics: {}\n", "observers.metrics.listen", "required", 2},
		{"metrics listen not host:port", "observers:\n  metrics:\n    listen: localhost\n", "observers.metrics.listen", "must be host:port", 3},
		{"metrics port not a number", "observers:\n  metrics:\n    listen: \"localhost:http\"\n", "observers.metrics.listen", `the port "http" is not a number`, 3},
		{"metrics port too big", "observers:\n  metrics:\n    listen: \":70000\"\n", "observers.metrics.listen", `the port "70000" is not a number from 0 to 65535`, 3},
		{"metrics unknown key", "observers:\n  metrics:\n    port: 9464\n", "observers.metrics.port", "unknown key (known: listen)", 3},
		{"metrics not a mapping", "observers:\n  metrics: \":9464\"\n", "observers.metrics", "must be a mapping", 2},
		{"trace without endpoint", "observers:\n  trace: {protocol: grpc}\n", "observers.trace.otlp_endpoint", "required", 2},
		{"trace empty endpoint", "observers:\n  trace:\n    otlp_endpoint: ''\n", "observers.trace.otlp_endpoint", "must be host:port", 3},
		{"trace bad scheme", "observers:\n  trace:\n    otlp_endpoint: \"ftp://c:4317\"\n", "observers.trace.otlp_endpoint", `the scheme must be http or https, not "ftp"`, 3},
		{"trace bad protocol", "observers:\n  trace:\n    otlp_endpoint: \"c:4317\"\n    protocol: GRPC\n", "observers.trace.protocol", `must be grpc or http, not "GRPC"`, 4},
		{"trace insecure not bool", "observers:\n  trace:\n    otlp_endpoint: \"c:4317\"\n    insecure: \"yes\"\n", "observers.trace.insecure", "true or false", 4},
		{"trace unknown key", "observers:\n  trace:\n    endpoint: \"c:4317\"\n", "observers.trace.endpoint", "unknown key (known: otlp_endpoint, protocol, insecure)", 3},
		{"fanout bad listen", "observers:\n  fanout:\n    listen: 8081\n", "observers.fanout.listen", "must be a string, not an integer", 3},
		{"fanout listen without port", "observers:\n  fanout:\n    listen: \"[::1]\"\n", "observers.fanout.listen", "must be host:port", 3},
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
			_, err := Parse("noeta.yaml", []byte(tt.yaml))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			// The mistake is among the errors (a section missing a
			// required key and naming an unknown one has both).
			list := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				list = j.Unwrap()
			}
			found := false
			for _, e := range list {
				ce := e.(*Error)
				if ce.Path == tt.path && ce.Line == tt.line && strings.Contains(ce.Msg, tt.msg) && ce.File == "noeta.yaml" {
					found = true
				}
			}
			if !found {
				t.Errorf("err = %q, want one at path %q line %d of noeta.yaml, with %q", err, tt.path, tt.line, tt.msg)
			}
		})
	}
}

func TestConfigErrorAt(t *testing.T) {
	f, err := Parse("", []byte("agents: {}\nobservers:\n  audit:\n    file: /nope/a.jsonl\n"))
	if err != nil {
		t.Fatal(err)
	}
	ce := f.ErrorAt("observers.audit.file", "cannot open")
	if ce.Line != 4 || ce.Path != "observers.audit.file" {
		t.Errorf("ErrorAt = %+v, want line 4", ce)
	}
}
