package settings

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

var table = Table{
	{Key: "url", Conn: true, Show: func(s string) string { return strings.ReplaceAll(s, "secret", "xxx") }},
	{Key: "password", Conn: true, Secret: true},
	{Key: "workers", Kind: Int},
	{Key: "grace", Kind: Duration},
	{Key: "child", Kind: Bool},
	{Key: "log_format"},
}

func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("url", "", "")
	fs.String("password", "", "")
	fs.Int("workers", 4, "")
	fs.Duration("grace", 30*time.Second, "")
	fs.Bool("child", true, "")
	fs.String("log-format", "text", "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func file(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrecedence: a flag beats the environment, which beats the file,
// which beats the default; only connection settings come from the
// environment unless all are read.
func TestPrecedence(t *testing.T) {
	f := file(t, "url: nats://file\nworkers: 2\ngrace: 10s\nchild: false\n")
	fs := flags(t, "--workers", "9")
	src, err := table.Apply(t.Context(), fs, true, f, env(map[string]string{"NOETA_URL": "nats://env", "NOETA_GRACE": "5s"}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"url":        {"nats://env", "env NOETA_URL"},
		"workers":    {"9", "flag --workers"},
		"grace":      {"5s", "env NOETA_GRACE"},
		"child":      {"false", f},
		"log_format": {"text", "default"},
	}
	for k, w := range want {
		fl := fs.Lookup(strings.ReplaceAll(k, "_", "-"))
		if fl.Value.String() != w[0] || src[k] != w[1] {
			t.Errorf("%s = %s from %s, want %s from %s", k, fl.Value.String(), src[k], w[0], w[1])
		}
	}
	// Not all: the environment sets the connection only.
	fs = flags(t)
	src, err = table.Apply(t.Context(), fs, false, "", env(map[string]string{"NOETA_URL": "nats://env", "NOETA_WORKERS": "7"}))
	if err != nil {
		t.Fatal(err)
	}
	if fs.Lookup("workers").Value.String() != "4" || src["workers"] != "default" || src["url"] != "env NOETA_URL" {
		t.Errorf("a serve-only setting came from the environment: %v", src)
	}
}

// TestErrors: every mistake is reported at once, naming the variable or
// the file, key and line.
func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		file string // "" is none
		env  map[string]string
		want []string
	}{
		{"env not a number", "", map[string]string{"NOETA_WORKERS": "many"}, []string{`NOETA_WORKERS: must be a number, not "many"`}},
		{"env bad duration", "", map[string]string{"NOETA_GRACE": "10"}, []string{"NOETA_GRACE: must be a duration"}},
		{"env bad bool", "", map[string]string{"NOETA_CHILD": "perhaps"}, []string{"NOETA_CHILD: must be true or false"}},
		{"file all wrong", "workers: \"2\"\ngrace: 10\nchild: yes please\nnope: 1\nurl: [a]\n", nil,
			[]string{"workers: must be a number", "(line 1)", "grace: must be a duration with its unit", "child: must be true or false", "nope: unknown key (line 4", "url: must be a single value, not a list"}},
		{"file twice", "workers: 1\nworkers: 2\n", nil, []string{"workers: given twice (line 2)"}},
		{"file not a mapping", "- workers\n", nil, []string{"want a mapping of settings"}},
		{"file not YAML", "workers: [\n", nil, []string{"settings.yaml: "}},
	}
	for _, tt := range tests {
		path := ""
		if tt.file != "" {
			path = file(t, tt.file)
		}
		_, err := table.Apply(t.Context(), flags(t), true, path, env(tt.env))
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tt.name, err, w)
			}
		}
	}
	if _, err := table.Apply(t.Context(), flags(t), true, filepath.Join(t.TempDir(), "none.yaml"), env(nil)); err == nil || !strings.Contains(err.Error(), "--serve-config") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestPrint: every setting with its value and source; a secret is not
// printed, and Show rewrites what it is given.
func TestPrint(t *testing.T) {
	fs := flags(t, "--url", "nats://u:secret@h", "--password", "hunter2")
	src, err := table.Apply(t.Context(), fs, true, "", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	table.Print(&b, fs, src, map[string]string{"workers": "5"})
	out := b.String()
	if strings.Contains(out, "hunter2") || strings.Contains(out, "secret") {
		t.Errorf("a secret is printed:\n%s", out)
	}
	for _, w := range []string{`url        "nats://u:xxx@h"`, `password   "(set)"`, "workers    5", "default"} {
		if !strings.Contains(out, w) {
			t.Errorf("no %q in:\n%s", w, out)
		}
	}
	if got := table.EnvList(false, "NOETA_EXTRA"); got != "  NOETA_URL, NOETA_PASSWORD, NOETA_EXTRA" {
		t.Errorf("EnvList(false) = %q", got)
	}
	if got := WrapWords("a b c d", 6, "  "); got != "  a b\n  c d" {
		t.Errorf("WrapWords = %q", got)
	}
}
