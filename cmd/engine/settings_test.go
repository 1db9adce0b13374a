package main

import (
	"regexp"
	"strings"
	"testing"
)

// printedSettings runs serve --print-config with env and returns each
// setting's value and source.
func printedSettings(t *testing.T, env map[string]string, args ...string) (map[string][2]string, int, string) {
	t.Helper()
	lookup := func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
	var out, errb syncBuffer
	code := runEnv(t.Context(), append([]string{"serve", "--print-config"}, args...), &out, &errb, lookup)
	got := map[string][2]string{}
	line := regexp.MustCompile(`^(\S+)\s+("(?:[^"\\]|\\.)*"|\S+)\s+(.+)$`)
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			got[m[1]] = [2]string{m[2], m[3]}
		}
	}
	return got, code, errb.String()
}

// TestSettingsPrecedence: a flag beats the environment, which beats the
// serve config file, which beats the default.
func TestSettingsPrecedence(t *testing.T) {
	t.Parallel()
	yamlFile := writeFile(t, "serve.yaml", `
nats: nats://file:4222
workers: 2
grace: 10s
queue: fromfile
child: false
log_format: json
password: hunter2
`)
	jsonFile := writeFile(t, "serve.json", `{"workers": 7, "lease_ttl": "5s", "http": ""}`)
	otherFile := writeFile(t, "other.yaml", "workers: 9\n")
	type want struct{ key, value, source string }
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []want
	}{
		{"defaults", nil, nil, []want{
			{"workers", "4", "default"}, {"grace", "30s", "default"}, {"nats", `""`, "default"},
			{"http", `"127.0.0.1:9465"`, "default"}, {"child", "true", "default"}, {"prefix", `"noeta"`, "default"},
		}},
		{"file", nil, []string{"--serve-config", yamlFile}, []want{
			{"workers", "2", yamlFile}, {"grace", "10s", yamlFile}, {"nats", `"nats://file:4222"`, yamlFile},
			{"queue", `"fromfile"`, yamlFile}, {"child", "false", yamlFile}, {"log_format", `"json"`, yamlFile},
			{"password", `"(set)"`, yamlFile}, {"replicas", "1", "default"},
		}},
		{"env over file", map[string]string{"NOETA_WORKERS": "3", "NOETA_NATS": "nats://env:4222", "NOETA_CHILD": "true"},
			[]string{"--serve-config", yamlFile}, []want{
				{"workers", "3", "env NOETA_WORKERS"}, {"nats", `"nats://env:4222"`, "env NOETA_NATS"},
				{"child", "true", "env NOETA_CHILD"}, {"grace", "10s", yamlFile},
			}},
		{"flag over env over file", map[string]string{"NOETA_WORKERS": "3", "NOETA_GRACE": "20s"},
			[]string{"--serve-config", yamlFile, "--workers", "5"}, []want{
				{"workers", "5", "flag --workers"}, {"grace", "20s", "env NOETA_GRACE"}, {"queue", `"fromfile"`, yamlFile},
			}},
		{"flag over file", nil, []string{"--serve-config", yamlFile, "--child=true", "--nats", "nats://flag:4222"}, []want{
			{"child", "true", "flag --child"}, {"nats", `"nats://flag:4222"`, "flag --nats"}, {"workers", "2", yamlFile},
		}},
		{"json file", nil, []string{"--serve-config", jsonFile}, []want{
			{"workers", "7", jsonFile}, {"lease_ttl", "5s", jsonFile}, {"http", `""`, jsonFile},
		}},
		{"the file named by the environment", map[string]string{"NOETA_SERVE_CONFIG": otherFile}, nil, []want{
			{"workers", "9", otherFile},
		}},
		{"--serve-config over NOETA_SERVE_CONFIG", map[string]string{"NOETA_SERVE_CONFIG": otherFile},
			[]string{"--serve-config", jsonFile}, []want{{"workers", "7", jsonFile}}},
		{"an empty variable is unset", map[string]string{"NOETA_WORKERS": ""}, []string{"--serve-config", yamlFile}, []want{
			{"workers", "2", yamlFile},
		}},
		{"password from the environment is not printed", map[string]string{"NOETA_PASSWORD": "s3cret", "NOETA_USER": "engine"}, nil, []want{
			{"password", `"(set)"`, "env NOETA_PASSWORD"}, {"user", `"engine"`, "env NOETA_USER"},
		}},
		{"a password in the URL is not printed", nil, []string{"--nats", "nats://engine:s3cret@h:4222"}, []want{
			{"nats", `"nats://engine:xxxxx@h:4222"`, "flag --nats"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, code, errOut := printedSettings(t, tc.env, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tc.want {
				if g := got[w.key]; g[0] != w.value || g[1] != w.source {
					t.Errorf("%s = %s from %s, want %s from %s", w.key, g[0], g[1], w.value, w.source)
				}
			}
			if strings.Contains(errOut+strings.Join(flatten(got), " "), "s3cret") || strings.Contains(strings.Join(flatten(got), " "), "hunter2") {
				t.Errorf("a password was printed")
			}
		})
	}
}

func flatten(m map[string][2]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k, v[0], v[1])
	}
	return out
}

// TestSettingsErrors: a bad value is refused with exit 2, naming the file
// and key or the variable.
func TestSettingsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		file string // serve.yaml's content, if any
		env  map[string]string
		want string // %s is the file's path
	}{
		{"file: not a number", "workers: four\n", nil, `%s: workers: must be a number, not "four"`},
		{"file: a quoted number", `workers: "4"` + "\n", nil, `%s: workers: must be a number`},
		{"file: a duration without unit", "grace: 30\n", nil, "%s: grace: must be a duration with its unit, such as 30s"},
		{"file: a bad duration", "grace: soon\n", nil, `%s: grace: must be a duration such as 30s or 1m, not "soon"`},
		{"file: not a bool", "child: maybe\n", nil, `%s: child: must be true or false, not "maybe"`},
		{"file: unknown key", "workers: 2\ncolour: red\n", nil, "%s: colour: unknown key (line 2"},
		{"file: twice", "workers: 2\nworkers: 3\n", nil, "%s: workers: given twice (line 2)"},
		{"file: a list", "nats: [a, b]\n", nil, "%s: nats: must be a single value, not a list"},
		{"file: not a mapping", "- workers\n", nil, "%s: want a mapping of settings"},
		{"file: not YAML", "workers: [\n", nil, "%s: "},
		{"env: not a number", "", map[string]string{"NOETA_WORKERS": "four"}, `NOETA_WORKERS: must be a number, not "four"`},
		{"env: bad duration", "", map[string]string{"NOETA_GRACE": "soon"}, `NOETA_GRACE: must be a duration such as 30s or 1m, not "soon"`},
		{"env: bad lease TTL", "", map[string]string{"NOETA_LEASE_TTL": "2"}, `NOETA_LEASE_TTL: must be a duration`},
		{"env: not a bool", "", map[string]string{"NOETA_CHILD": "maybe"}, `NOETA_CHILD: must be true or false`},
		{"env beats a bad file value", "workers: four\n", map[string]string{"NOETA_WORKERS": "four"}, `NOETA_WORKERS: must be a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{}
			path := "(none)"
			if tc.file != "" {
				path = writeFile(t, "serve.yaml", tc.file)
				args = append(args, "--serve-config", path)
			}
			_, code, errOut := printedSettings(t, tc.env, args...)
			want := strings.ReplaceAll(tc.want, "%s", path)
			if code != exitUsage || !strings.Contains(errOut, want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errOut, want)
			}
		})
	}
	_, code, errOut := printedSettings(t, nil, "--serve-config", "/nonexistent/serve.yaml")
	if code != exitUsage || !strings.Contains(errOut, "--serve-config: open /nonexistent/serve.yaml") {
		t.Errorf("missing file: exit %d, %q", code, errOut)
	}
}
