package webui

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
)

// approvalYAML makes every echo call wait for a person.
const approvalYAML = `
agents:
  assistant:
    tools: [echo]
    permissions: {require_approval_tools: [echo]}
`

const askTask = `
agent: assistant
goal: "say hello once someone agrees"
script:
  - tool_calls: [{tool: echo, args: {text: hello}}]
  - finish: {answer: done}
`

const aliceToken = "alice-secret-token"

func tokenHash(tok string) [32]byte { return sha256.Sum256([]byte(tok)) }

// openHost is a host on an embedded server in a temp dir that runs tasks.
func openHost(t *testing.T) *host.Host {
	t.Helper()
	return openHostWith(t, 1, approvalYAML)
}

// openHostN is openHost with n workers.
func openHostN(t *testing.T, n int) *host.Host {
	t.Helper()
	return openHostWith(t, n, approvalYAML)
}

func openHostWith(t *testing.T, n int, yaml string) *host.Host {
	t.Helper()
	cfg, err := config.Parse("noeta.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	h, err := hostconfig.Open(t.Context(), hostconfig.Options{DataDir: t.TempDir(), Config: cfg, Workers: n, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h.Host
}

func testHTTP() config.HTTP {
	return config.HTTP{
		Tokens:       []config.HTTPToken{{Name: "alice", SHA256: tokenHash(aliceToken)}},
		TrustedProxy: &config.TrustedProxy{Header: "X-Auth-Request-User", From: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")}},
		Hosts:        []string{"inbox.example.com"},
	}
}

func newServer(t *testing.T, h *host.Host) *Server {
	t.Helper()
	s, err := New(Config{Host: h, HTTP: testHTTP(), Listen: []string{"127.0.0.1:8080"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// submitWaiting submits askTask and waits until it asks for approval; it
// returns the task and the handle.
func submitWaiting(t *testing.T, h *host.Host) (string, string) {
	t.Helper()
	tf, err := policy.ParseTaskFile("task.yaml", []byte(askTask))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	id, err := h.Submit(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rest, err := h.Wait(ctx, id)
	if err != nil || rest.Status != host.RestWaiting || len(rest.Waiting) != 1 {
		t.Fatalf("the task did not come to wait for approval: %+v, %v", rest, err)
	}
	return id, rest.Waiting[0].Handle
}

type req struct {
	method, path, body string
	hdr                map[string]string
	remote             string
}

func do(s *Server, r req) *httptest.ResponseRecorder {
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	hr.Host = "127.0.0.1:8080"
	hr.RemoteAddr = "127.0.0.1:5555"
	if r.remote != "" {
		hr.RemoteAddr = r.remote
	}
	for k, v := range r.hdr {
		if k == "Host" {
			hr.Host = v
			continue
		}
		hr.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, hr)
	return w
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// jsonPost is a POST as a script sends it: JSON, bearer, no Origin.
func jsonPost(tok string, extra map[string]string) map[string]string {
	m := map[string]string{"Content-Type": "application/json"}
	if tok != "" {
		m["Authorization"] = "Bearer " + tok
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func problemOf(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json (body %s)", ct, w.Body)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"type", "title", "status", "detail"} {
		if _, ok := p[k]; !ok {
			t.Errorf("problem lacks %s: %s", k, w.Body)
		}
	}
	return p
}

// TestAuthRefusals: every way of not proving who one is gets a 401
// problem, and a header that only a trusted proxy may set is ignored from
// any other peer — the request it came with is not let in on it.
func TestAuthRefusals(t *testing.T) {
	s := newServer(t, openHost(t))
	tests := []struct {
		name string
		r    req
	}{
		{"no credentials", req{method: "GET", path: "/api/v1/whoami"}},
		{"wrong token", req{method: "GET", path: "/api/v1/whoami", hdr: bearer("not-alice")}},
		{"token hash given as the token", req{method: "GET", path: "/api/v1/whoami", hdr: map[string]string{"Authorization": "Bearer " + strings.Repeat("0", 64)}}},
		{"basic auth", req{method: "GET", path: "/api/v1/whoami", hdr: map[string]string{"Authorization": "Basic YWxpY2U6eA=="}}},
		{"empty bearer", req{method: "GET", path: "/api/v1/whoami", hdr: map[string]string{"Authorization": "Bearer "}}},
		{"proxy header from an untrusted peer", req{method: "GET", path: "/api/v1/whoami", hdr: map[string]string{"X-Auth-Request-User": "mallory"}}},
		{"proxy header from a trusted peer with two values", req{method: "GET", path: "/api/v1/whoami", remote: "10.9.1.1:4000", hdr: map[string]string{"X-Auth-Request-User": "a b"}}},
		{"proxy header naming the expiry", req{method: "GET", path: "/api/v1/whoami", remote: "10.9.1.1:4000", hdr: map[string]string{"X-Auth-Request-User": "timeout"}}},
		{"proxy header naming the local user", req{method: "GET", path: "/api/v1/whoami", remote: "10.9.1.1:4000", hdr: map[string]string{"X-Auth-Request-User": "cli:root"}}},
		// Before, names were refused only as spelt in lower case: CLI:root
		// and Timeout were taken.
		{"proxy header naming the local user in upper case", req{method: "GET", path: "/api/v1/whoami", remote: "10.9.1.1:4000", hdr: map[string]string{"X-Auth-Request-User": "CLI:root"}}},
		{"proxy header naming the expiry capitalised", req{method: "GET", path: "/api/v1/whoami", remote: "10.9.1.1:4000", hdr: map[string]string{"X-Auth-Request-User": "Timeout"}}},
		{"proxy header naming the expiry in upper case", req{method: "GET", path: "/api/v1/whoami", remote: "10.9.1.1:4000", hdr: map[string]string{"X-Auth-Request-User": "TIMEOUT"}}},
		{"proxy header naming the bare door", req{method: "GET", path: "/api/v1/whoami", remote: "10.9.1.1:4000", hdr: map[string]string{"X-Auth-Request-User": "Cli"}}},
		{"wrong token beside a good cookie is not passed over", req{method: "GET", path: "/api/v1/approvals", hdr: bearer("nope")}},
		{"unknown session", req{method: "GET", path: "/api/v1/tasks", hdr: map[string]string{"Cookie": SessionCookie + "=forged"}}},
		{"answer without credentials", req{method: "POST", path: "/api/v1/tasks/x/approvals/h", body: `{"decision":"approve"}`, hdr: jsonPost("", nil)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(s, tt.r)
			if w.Code != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401: %s", w.Code, w.Body)
			}
			problemOf(t, w)
		})
	}
}

// TestAuthPaths: a bearer token, a trusted proxy's header from a listed
// peer, and a session from a login each name the principal and how it was
// established; a one-time login token works once.
func TestAuthPaths(t *testing.T) {
	s := newServer(t, openHost(t))
	who := func(r req) Principal {
		t.Helper()
		w := do(s, r)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		var p Principal
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if p := who(req{method: "GET", path: "/api/v1/whoami", hdr: bearer(aliceToken)}); p != (Principal{"alice", noeta.AuthToken}) {
		t.Errorf("bearer: %+v", p)
	}
	if p := who(req{method: "GET", path: "/api/v1/whoami", remote: "10.9.3.4:999", hdr: map[string]string{"X-Auth-Request-User": "bob@example.com"}}); p != (Principal{"bob@example.com", noeta.AuthProxy}) {
		t.Errorf("proxy: %+v", p)
	}
	login := func(tok string, hdr map[string]string) *httptest.ResponseRecorder {
		b, _ := json.Marshal(map[string]string{"token": tok})
		return do(s, req{method: "POST", path: "/api/v1/login", body: string(b), hdr: hdr})
	}
	w := login(aliceToken, map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:8080"})
	if w.Code != http.StatusOK {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	c := w.Result().Cookies()
	if len(c) != 1 || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode || c[0].Secure {
		t.Fatalf("cookie: %+v", c)
	}
	cookie := map[string]string{"Cookie": SessionCookie + "=" + c[0].Value}
	if p := who(req{method: "GET", path: "/api/v1/whoami", hdr: cookie}); p != (Principal{"alice", noeta.AuthToken}) {
		t.Errorf("session: %+v", p)
	}
	once := s.LoginToken(Principal{Name: "cli:tester", Auth: noeta.AuthLocal})
	ct := map[string]string{"Content-Type": "application/json"}
	if w := login(once, ct); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"cli:tester"`) {
		t.Fatalf("one-time login: %d %s", w.Code, w.Body)
	}
	if w := login(once, ct); w.Code != http.StatusUnauthorized {
		t.Errorf("one-time token used twice: %d %s", w.Code, w.Body)
	}
	if w := login("wrong", ct); w.Code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d %s", w.Code, w.Body)
	}
	// Logged out, the session is gone.
	lo := map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:8080"}
	for k, v := range cookie {
		lo[k] = v
	}
	if w := do(s, req{method: "POST", path: "/api/v1/logout", body: "{}", hdr: lo}); w.Code != http.StatusNoContent {
		t.Fatalf("logout: %d %s", w.Code, w.Body)
	}
	if w := do(s, req{method: "GET", path: "/api/v1/whoami", hdr: cookie}); w.Code != http.StatusUnauthorized {
		t.Errorf("after logout: %d", w.Code)
	}
}

// TestSessionExpires: a session is refused once its TTL has passed.
func TestSessionExpires(t *testing.T) {
	s := newServer(t, openHost(t))
	now := time.Now()
	s.auth.now = func() time.Time { return now }
	_, cookie, ok := s.auth.login(aliceToken)
	if !ok {
		t.Fatal("login refused")
	}
	if _, ok := s.auth.session(cookie); !ok {
		t.Fatal("fresh session refused")
	}
	now = now.Add(DefaultSessionTTL)
	if _, ok := s.auth.session(cookie); ok {
		t.Error("expired session accepted")
	}
}

// TestRequestRefusals: what a browser on another site, a rebound DNS name
// or a careless client could send is refused, each with its problem.
func TestRequestRefusals(t *testing.T) {
	h := openHost(t)
	s := newServer(t, h)
	task, handle := submitWaiting(t, h)
	answerPath := "/api/v1/tasks/" + task + "/approvals/" + handle
	_, sess, _ := s.auth.login(aliceToken)
	cookie := SessionCookie + "=" + sess
	tests := []struct {
		name   string
		r      req
		status int
		typ    string
	}{
		{"a rebound DNS name", req{method: "GET", path: "/api/v1/whoami", hdr: map[string]string{"Authorization": "Bearer " + aliceToken, "Host": "evil.example:8080"}}, http.StatusMisdirectedRequest, "wrong-host"},
		{"a rebound DNS name to the page", req{method: "GET", path: "/", hdr: map[string]string{"Host": "evil.example"}}, http.StatusMisdirectedRequest, "wrong-host"},
		{"a form post", req{method: "POST", path: answerPath, body: "decision=approve", hdr: map[string]string{"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded", "Origin": "http://127.0.0.1:8080"}}, http.StatusUnsupportedMediaType, "json-required"},
		{"text/plain posing as JSON", req{method: "POST", path: answerPath, body: `{"decision":"approve"}`, hdr: map[string]string{"Cookie": cookie, "Content-Type": "text/plain", "Origin": "http://127.0.0.1:8080"}}, http.StatusUnsupportedMediaType, "json-required"},
		{"another origin with the session", req{method: "POST", path: answerPath, body: `{"decision":"approve"}`, hdr: map[string]string{"Cookie": cookie, "Content-Type": "application/json", "Origin": "http://evil.example"}}, http.StatusForbidden, "cross-origin"},
		{"another origin with a token", req{method: "POST", path: answerPath, body: `{"decision":"approve"}`, hdr: jsonPost(aliceToken, map[string]string{"Origin": "http://evil.example"})}, http.StatusForbidden, "cross-origin"},
		{"no origin with a session", req{method: "POST", path: answerPath, body: `{"decision":"approve"}`, hdr: map[string]string{"Cookie": cookie, "Content-Type": "application/json"}}, http.StatusForbidden, "cross-origin"},
		{"oversized body", req{method: "POST", path: answerPath, body: `{"decision":"deny","reason":"` + strings.Repeat("x", MaxBody) + `"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusRequestEntityTooLarge, "body-too-large"},
		{"unknown handle", req{method: "POST", path: "/api/v1/tasks/" + task + "/approvals/no-such-handle", body: `{"decision":"approve"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusConflict, "not-waiting"},
		{"bad decision", req{method: "POST", path: answerPath, body: `{"decision":"yes"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusBadRequest, "bad-decision"},
		{"no decision", req{method: "POST", path: answerPath, body: `{"reason":"x"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusBadRequest, "bad-decision"},
		{"an approver named in the body", req{method: "POST", path: answerPath, body: `{"decision":"approve","approver":"root"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusBadRequest, "bad-json"},
		{"two bodies", req{method: "POST", path: answerPath, body: `{"decision":"approve"}{"decision":"deny"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusBadRequest, "bad-json"},
		{"a reason over the bound", req{method: "POST", path: answerPath, body: `{"decision":"deny","reason":"` + strings.Repeat("x", MaxReason+1) + `"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusBadRequest, "bad-reason"},
		{"not a task id", req{method: "POST", path: "/api/v1/tasks/no.pe/approvals/" + handle, body: `{"decision":"approve"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusBadRequest, "bad-task"},
		{"an unknown task", req{method: "POST", path: "/api/v1/tasks/nope/approvals/" + handle, body: `{"decision":"approve"}`, hdr: jsonPost(aliceToken, nil)}, http.StatusNotFound, "not-found"},
		{"an unknown endpoint", req{method: "GET", path: "/api/v1/nothing", hdr: bearer(aliceToken)}, http.StatusNotFound, "not-found"},
		{"a bad page size", req{method: "GET", path: "/api/v1/tasks?limit=100000", hdr: bearer(aliceToken)}, http.StatusBadRequest, "bad-query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := do(s, tt.r)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if p := problemOf(t, w); p["type"] != "urn:noeta:problem:"+tt.typ {
				t.Errorf("type %v, want %s", p["type"], tt.typ)
			}
		})
	}
	// None of them answered: the request is still open, and a proper answer
	// from the page (session, JSON, this Origin) goes through as alice.
	w := do(s, req{method: "POST", path: answerPath, body: `{"decision":"deny","reason":"not today"}`,
		hdr: map[string]string{"Cookie": cookie, "Content-Type": "application/json", "Origin": "http://127.0.0.1:8080"}})
	if w.Code != http.StatusOK {
		t.Fatalf("answer: %d %s", w.Code, w.Body)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := h.Wait(ctx, task); err != nil {
		t.Fatal(err)
	}
	envs, err := h.Events(t.Context(), task, 0)
	if err != nil {
		t.Fatal(err)
	}
	var resolved []*noeta.ApprovalResolved
	for _, e := range envs {
		if p, _, err := e.Decode(); err == nil {
			if r, ok := p.(*noeta.ApprovalResolved); ok {
				resolved = append(resolved, r)
			}
		}
	}
	if len(resolved) != 1 || resolved[0].Approver != "alice" || resolved[0].Auth != noeta.AuthToken || resolved[0].Decision != noeta.ApprovalDeny || resolved[0].Reason != "not today" {
		t.Fatalf("resolved: %+v", resolved)
	}
	// Answered, a second answer is a conflict.
	w = do(s, req{method: "POST", path: answerPath, body: `{"decision":"approve"}`, hdr: jsonPost(aliceToken, nil)})
	if w.Code != http.StatusConflict {
		t.Errorf("second answer: %d %s", w.Code, w.Body)
	}
}

// TestPageHeaders: the page is served to anyone (it holds no data) under a
// CSP that allows nothing but its own files.
func TestPageHeaders(t *testing.T) {
	s := newServer(t, openHost(t))
	for _, p := range []string{"/", "/login", "/assets/app.js", "/assets/app.css"} {
		w := do(s, req{method: "GET", path: p})
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d", p, w.Code)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'self'") {
			t.Errorf("%s: CSP %q", p, csp)
		}
	}
	w := do(s, req{method: "GET", path: "/"})
	if b := w.Body.String(); strings.Contains(b, " on") && strings.Contains(b, "=\"") && strings.Contains(b, "onclick") {
		t.Error("the page has an inline event handler")
	}
}

// TestAnswerRefusedByRules: an authenticated principal the approvals rules
// do not allow gets a 403 naming the refusal, and the request stays open for
// one who is allowed.
func TestAnswerRefusedByRules(t *testing.T) {
	h := openHostWith(t, 1, approvalYAML+`
approvals:
  rules:
    - name: sre-approves-echo
      when: 'tool == "echo"'
      approvers: 'approver == "sre"'
`)
	s, err := New(Config{Host: h, HTTP: config.HTTP{Tokens: []config.HTTPToken{
		{Name: "alice", SHA256: tokenHash(aliceToken)}, {Name: "sre", SHA256: tokenHash("sre-token")},
	}}, Listen: []string{"127.0.0.1:8080"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	task, handle := submitWaiting(t, h)
	path := "/api/v1/tasks/" + task + "/approvals/" + handle
	w := do(s, req{method: "POST", path: path, body: `{"decision":"approve"}`, hdr: jsonPost(aliceToken, nil)})
	if w.Code != http.StatusForbidden {
		t.Fatalf("alice: %d %s", w.Code, w.Body)
	}
	if p := problemOf(t, w); p["type"] != "urn:noeta:problem:not-allowed" {
		t.Errorf("alice: %v", p)
	}
	ws, err := h.Waiting(t.Context())
	if err != nil || len(ws) != 1 || ws[0].Task != task {
		t.Fatalf("the request did not stay open: %+v %v", ws, err)
	}
	if w := do(s, req{method: "POST", path: path, body: `{"decision":"approve"}`, hdr: jsonPost("sre-token", nil)}); w.Code != http.StatusOK {
		t.Fatalf("sre: %d %s", w.Code, w.Body)
	}
}

// TestTasksAndTask: the task list pages, and a task's summary names what it
// waits on.
func TestTasksAndTask(t *testing.T) {
	h := openHost(t)
	s := newServer(t, h)
	a, handle := submitWaiting(t, h)
	b, _ := submitWaiting(t, h)
	var page struct {
		Tasks      []TaskRow `json:"tasks"`
		Total      int       `json:"total"`
		NextCursor int       `json:"next_cursor"`
	}
	w := do(s, req{method: "GET", path: "/api/v1/tasks?limit=1", hdr: bearer(aliceToken)})
	if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil || w.Code != http.StatusOK {
		t.Fatalf("%d %s %v", w.Code, w.Body, err)
	}
	if page.Total != 2 || len(page.Tasks) != 1 || page.NextCursor != 1 || page.Tasks[0].Task != b {
		t.Fatalf("first page: %+v", page)
	}
	page.NextCursor = 0
	w = do(s, req{method: "GET", path: "/api/v1/tasks?limit=1&cursor=1", hdr: bearer(aliceToken)})
	if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil || len(page.Tasks) != 1 || page.NextCursor != 0 || page.Tasks[0].Task != a {
		t.Fatalf("second page: %+v %v", page, err)
	}
	if r := page.Tasks[0]; r.Agent != "assistant" || r.Status != "waiting" || len(r.Waiting) != 1 || r.Waiting[0] != handle {
		t.Errorf("row: %+v", r)
	}
	// Filters: status words, agent, text, since; a bad one is a 400 naming it.
	filters := []struct {
		query string
		code  int
		n     int
	}{
		{"status=waiting", http.StatusOK, 2},
		{"status=completed,failed", http.StatusOK, 0},
		{"agent=assistant&q=SOMEONE+AGREES", http.StatusOK, 2},
		{"q=" + a, http.StatusOK, 1},
		{"agent=nobody", http.StatusOK, 0},
		{"since=1h", http.StatusOK, 2},
		{"since=2000-01-01T00:00:00Z&status=waiting", http.StatusOK, 2},
		{"status=terminal", http.StatusBadRequest, 0},
		{"cursor=-1", http.StatusBadRequest, 0},
		{"cursor=1&status=waiting", http.StatusOK, 1},
		{"since=yesterday", http.StatusBadRequest, 0},
		{"since=-1h", http.StatusBadRequest, 0},
	}
	for _, f := range filters {
		w := do(s, req{method: "GET", path: "/api/v1/tasks?" + f.query, hdr: bearer(aliceToken)})
		var got struct {
			Tasks []TaskRow `json:"tasks"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &got)
		if w.Code != f.code || len(got.Tasks) != f.n {
			t.Errorf("?%s: %d with %d tasks, want %d with %d: %s", f.query, w.Code, len(got.Tasks), f.code, f.n, w.Body)
		}
	}
	var d TaskDetail
	w = do(s, req{method: "GET", path: "/api/v1/tasks/" + a, hdr: bearer(aliceToken)})
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil || w.Code != http.StatusOK {
		t.Fatalf("%d %s %v", w.Code, w.Body, err)
	}
	if d.Goal != "say hello once someone agrees" || d.Pending[handle].Tool != "echo" || d.Root != a {
		t.Errorf("detail: %+v", d)
	}
	if w := do(s, req{method: "GET", path: "/api/v1/tasks/nosuchtask", hdr: bearer(aliceToken)}); w.Code != http.StatusNotFound {
		t.Errorf("unknown task: %d", w.Code)
	}
	var evs struct {
		Events []json.RawMessage `json:"events"`
	}
	w = do(s, req{method: "GET", path: "/api/v1/tasks/" + a + "/events?after=2", hdr: bearer(aliceToken)})
	if err := json.Unmarshal(w.Body.Bytes(), &evs); err != nil || len(evs.Events) == 0 || !strings.Contains(string(evs.Events[0]), `"seq":3`) {
		t.Errorf("events after 2: %s %v", w.Body, err)
	}
}

// TestQuestionSelfAnswerRefused: under self_approval: deny the submitter of
// a task may not answer its question over HTTP (403, the question stays
// open); someone else may.
//
// Before: a question's reply was taken from anyone, the submitter
// included.
func TestQuestionSelfAnswerRefused(t *testing.T) {
	h := openHostWith(t, 1, approvalYAML+`
approvals:
  self_approval: deny
`)
	s, err := New(Config{Host: h, HTTP: config.HTTP{Tokens: []config.HTTPToken{
		{Name: "alice", SHA256: tokenHash(aliceToken)}, {Name: "sre", SHA256: tokenHash("sre-token")},
	}}, Listen: []string{"127.0.0.1:8080"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	tf, err := policy.ParseTaskFile("task.yaml", []byte(`
agent: assistant
goal: "ask which branch"
script:
  - yield_for_human: {question: "which branch?"}
  - finish: {answer: done}
`))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := host.TaskFromFile(tf)
	if err != nil {
		t.Fatal(err)
	}
	sub.SubmittedBy = "alice"
	task, err := h.Submit(t.Context(), sub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if rest, err := h.Wait(ctx, task); err != nil || rest.Status != host.RestWaiting {
		t.Fatalf("the task did not come to wait on its question: %+v, %v", rest, err)
	}
	path := "/api/v1/tasks/" + task + "/approvals/question-1"
	w := do(s, req{method: "POST", path: path, body: `{"decision":"approve","reason":"main"}`, hdr: jsonPost(aliceToken, nil)})
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "submitted this task") {
		t.Fatalf("alice answering her own task's question: %d %s", w.Code, w.Body)
	}
	if w := do(s, req{method: "POST", path: path, body: `{"decision":"approve","reason":"main"}`, hdr: jsonPost("sre-token", nil)}); w.Code != http.StatusOK {
		t.Fatalf("sre: %d %s", w.Code, w.Body)
	}
	rest, err := h.Wait(ctx, task)
	if err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("after sre's reply: %+v, %v", rest, err)
	}
}

// TestPins: GET /api/v1/pins lists the tool definitions to review from
// Config.Pins, an empty list where nothing lists them, and refuses the
// unauthenticated.
func TestPins(t *testing.T) {
	h := openHost(t)
	plain := newServer(t, h)
	w := do(plain, req{method: "GET", path: "/api/v1/pins", hdr: bearer(aliceToken)})
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"pins":[]}` {
		t.Fatalf("without a source: %d %s", w.Code, w.Body)
	}
	if w := do(plain, req{method: "GET", path: "/api/v1/pins"}); w.Code != 401 {
		t.Fatalf("unauthenticated: %d", w.Code)
	}
	pin := ToolPin{Server: "files", Tool: "read", Pinned: strings.Repeat("a", 64), Pending: strings.Repeat("b", 64), Accept: `engine gateway pin accept "files" "read"`}
	s, err := New(Config{Host: h, HTTP: testHTTP(), Listen: []string{"127.0.0.1:8080"}, Logger: slog.New(slog.DiscardHandler),
		Pins: func(context.Context) ([]ToolPin, error) { return []ToolPin{pin}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	w = do(s, req{method: "GET", path: "/api/v1/pins", hdr: bearer(aliceToken)})
	var got struct{ Pins []ToolPin }
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 || len(got.Pins) != 1 || got.Pins[0].Accept != pin.Accept {
		t.Fatalf("with a source: %d %s %v", w.Code, w.Body, err)
	}
}
