package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/approvals"
	"github.com/noeta-go/noeta/config"
)

// TestUILoginURL: engine ui on the embedded default prints a login URL
// whose one-time token logs in as the local user, once; the API refuses
// everyone else.
func TestUILoginURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "noeta.yaml")
	if err := os.WriteFile(cfg, []byte("agents:\n  a: {tools: [echo]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startEngine(t, "ui", "--data", filepath.Join(dir, "data"), "--config", cfg, "--workspace", dir,
		"--listen", "127.0.0.1:0", "--open=false", "--workers", "1")
	re := regexp.MustCompile(`log in as (\S+) \(the link works once\): (http://(127\.0\.0\.1:\d+)/login#token=(\S+))`)
	var m []string
	waitFor(t, time.Minute, "the login URL", func() bool {
		m = re.FindStringSubmatch(p.stderr.String())
		return m != nil
	})
	base, tok := "http://"+m[3], m[4]
	if m[1] != approvals.LocalApprover() {
		t.Errorf("principal %s, want %s", m[1], approvals.LocalApprover())
	}
	login := func() *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/api/v1/login", strings.NewReader(`{"token":"`+tok+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", base)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	res := login()
	if res.StatusCode != http.StatusOK || len(res.Cookies()) != 1 {
		t.Fatalf("login: %d", res.StatusCode)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/api/v1/whoami", nil)
	req.AddCookie(res.Cookies()[0])
	who, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer who.Body.Close()
	var pr struct{ Name, Auth string }
	if err := json.NewDecoder(who.Body).Decode(&pr); err != nil || pr.Name != approvals.LocalApprover() || pr.Auth != "local" {
		t.Fatalf("whoami: %+v %v", pr, err)
	}
	if res := login(); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("the one-time token logged in twice: %d", res.StatusCode)
	}
	anon, err := http.Get(base + "/api/v1/approvals")
	if err != nil {
		t.Fatal(err)
	}
	anon.Body.Close()
	if anon.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous approvals: %d", anon.StatusCode)
	}
}

// TestTokenPrintsAConfigLine: engine token prints a token and a line the
// config accepts, holding the token's hash, never the token.
func TestTokenPrintsAConfigLine(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runEnv(context.Background(), []string{"token", "--name", "alice"}, &out, &errb, os.LookupEnv); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	tok := regexp.MustCompile(`token: (\S+)`).FindStringSubmatch(out.String())
	i := strings.Index(out.String(), "http:\n")
	if tok == nil || i < 0 {
		t.Fatalf("output:\n%s", out.String())
	}
	f, err := config.Parse("noeta.yaml", []byte(out.String()[i:]))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String()[i:], tok[1]) || len(f.HTTP.Tokens) != 1 || f.HTTP.Tokens[0].Name != "alice" {
		t.Errorf("config line: %+v\n%s", f.HTTP, out.String())
	}
	if code := runEnv(context.Background(), []string{"token", "--name", "a b"}, &out, &errb, os.LookupEnv); code != exitUsage {
		t.Errorf("a name with a space: exit %d", code)
	}
}

// TestServeMountsTheAPIAndUIAttaches: engine serve --http serves the API
// (to a token of the config) beside /healthz; engine ui on the data
// directory serve holds attaches to its server instead of failing, and its
// login URL works.
func TestServeMountsTheAPIAndUIAttaches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "noeta.yaml")
	// sha256("t0k")
	yaml := "agents:\n  a: {tools: [echo]}\nhttp:\n  tokens:\n    - {name: ops, sha256: \"" + sha256Hex("t0k") + "\"}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	sv := startEngine(t, "serve", "--data", data, "--config", cfg, "--workspace", dir, "--http", "127.0.0.1:0",
		"--workers", "1", "--log-format", "json")
	sv.waitLog(t, "serving", time.Minute)
	m := regexp.MustCompile(`"msg":"http listening","addr":"([^"]+)"`).FindStringSubmatch(sv.stderr.String())
	if m == nil {
		t.Fatalf("no http address in:\n%s", sv.stderr)
	}
	base := "http://" + m[1]
	get := func(url, tok string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", url, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		path, tok string
		want      int
	}{
		{"/healthz", "", 200},
		{"/api/v1/whoami", "t0k", 200},
		{"/api/v1/approvals", "t0k", 200},
		{"/api/v1/approvals", "", 401},
		{"/api/v1/whoami", "wrong", 401},
		{"/", "", 200},
	} {
		if got := get(base+c.path, c.tok); got != c.want {
			t.Errorf("GET %s (token %q): %d, want %d", c.path, c.tok, got, c.want)
		}
	}

	ui := startEngine(t, "ui", "--data", data, "--config", cfg, "--workspace", dir, "--listen", "127.0.0.1:0", "--open=false")
	re := regexp.MustCompile(`\(the link works once\): http://(127\.0\.0\.1:\d+)/login#token=(\S+)`)
	var u []string
	waitFor(t, time.Minute, "the login URL of the attached ui", func() bool {
		u = re.FindStringSubmatch(ui.stderr.String())
		return u != nil
	})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://"+u[1]+"/api/v1/login", strings.NewReader(`{"token":"`+u[2]+`"}`))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("login to the attached ui: %d\n%s", res.StatusCode, ui.stderr)
	}
	if !strings.Contains(ui.stderr.String(), "using the server of the process that holds the data directory") {
		t.Errorf("ui did not attach:\n%s", ui.stderr)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
