package settings

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestLogger(t *testing.T) {
	tests := []struct {
		format, level string
		wantErr       string
		// logs says whether an info record is written.
		logs bool
		json bool
	}{
		{"text", "info", "", true, false},
		{"json", "debug", "", true, true},
		{"text", "warn", "", false, false},
		{"json", "ERROR", "", false, true},
		{"xml", "info", `--log-format is "xml", want text or json`, false, false},
		{"text", "loud", `--log-level is "loud", want debug, info, warn or error`, false, false},
	}
	for _, tt := range tests {
		var b strings.Builder
		l, err := Logger(&b, tt.format, tt.level)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Logger(%q, %q): %v, want %q", tt.format, tt.level, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Logger(%q, %q): %v", tt.format, tt.level, err)
		}
		l.Info("hello")
		if got := b.Len() > 0; got != tt.logs {
			t.Errorf("Logger(%q, %q) wrote %q, want a record: %v", tt.format, tt.level, b.String(), tt.logs)
		}
		if tt.logs && strings.HasPrefix(b.String(), "{") != tt.json {
			t.Errorf("Logger(%q, %q) wrote %q", tt.format, tt.level, b.String())
		}
	}
}

func TestFileName(t *testing.T) {
	env := func(v string, ok bool) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k != "NOETA_SERVE_CONFIG" {
				return "", false
			}
			return v, ok
		}
	}
	tests := []struct {
		args   []string
		lookup func(string) (string, bool)
		want   string
	}{
		{nil, env("", false), ""},
		{nil, env("/etc/from-env.yaml", true), "/etc/from-env.yaml"},
		{[]string{"--serve-config", "flag.yaml"}, env("/etc/from-env.yaml", true), "flag.yaml"},
		{[]string{"--serve-config", ""}, env("/etc/from-env.yaml", true), ""},
	}
	for _, tt := range tests {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.String("serve-config", "", "")
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if got := FileName(fs, "serve-config", "NOETA_SERVE_CONFIG", tt.lookup); got != tt.want {
			t.Errorf("%v: FileName = %q, want %q", tt.args, got, tt.want)
		}
	}
}
