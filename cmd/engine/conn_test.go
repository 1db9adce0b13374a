package main

import (
	"strings"
	"testing"
)

// TestConnectionEnvEveryVerb: the connection settings come from the
// environment for every verb, the serve settings only for serve.
func TestConnectionEnvEveryVerb(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, verb := range [][]string{{"tasks"}, {"inspect", "T1"}, {"submit", "task.yaml"}, {"approve", "T1", "h1"}, {"run", "task.yaml"}} {
		var out, errb syncBuffer
		code := runEnv(t.Context(), append(verb, "--data", t.TempDir()), &out, &errb, env(map[string]string{"NOETA_REPLICAS": "3"}))
		if code != exitUsage || !strings.Contains(errb.String(), "--replicas 3 needs a cluster") {
			t.Errorf("%v with NOETA_REPLICAS=3: exit %d, %s", verb, code, &errb)
		}
	}
	// NOETA_WORKERS is serve's: run ignores it (and fails on its task file).
	var out, errb syncBuffer
	code := runEnv(t.Context(), []string{"run", "/nonexistent/task.yaml", "--config", exampleConfig, "--data", t.TempDir()}, &out, &errb,
		env(map[string]string{"NOETA_WORKERS": "four"}))
	if code != exitUsage || strings.Contains(errb.String(), "NOETA_WORKERS") || !strings.Contains(errb.String(), "task file") {
		t.Errorf("run with NOETA_WORKERS=four: exit %d, %s", code, &errb)
	}
}

// TestBatchFlag: --batch (or NOETA_BATCH) names how a turn's records are
// written; a name that is none of the modes is bad usage naming the flag,
// before anything is opened.
func TestBatchFlag(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"tasks", "--batch", "fast"}, nil},
		{[]string{"tasks"}, map[string]string{"NOETA_BATCH": "Packed"}},
	} {
		var out, errb syncBuffer
		code := runEnv(t.Context(), append(c.args, "--data", t.TempDir()), &out, &errb, env(c.env))
		if code != exitUsage || !strings.Contains(errb.String(), "--batch is") {
			t.Errorf("%v %v: exit %d, %s; want exit %d naming --batch", c.args, c.env, code, &errb, exitUsage)
		}
	}
	for _, mode := range []string{"packed", "sequential", "atomic"} {
		var out, errb syncBuffer
		if code := runEnv(t.Context(), []string{"tasks", "--batch", mode, "--data", t.TempDir()}, &out, &errb, env(nil)); code != 0 {
			t.Errorf("--batch %s: exit %d, %s", mode, code, &errb)
		}
	}
}
