package mcp

import (
	"errors"
	"reflect"
	"testing"
)

// TestMCPExpand: ${VAR} in env and headers is expanded when the server
// starts; a variable that is not set is an error naming the key and the
// variable, never the rest of the value.
func TestMCPExpand(t *testing.T) {
	t.Parallel()
	s := Server{Name: "issues", Headers: map[string]string{"Authorization": "Bearer ${TOKEN}", "X-Plain": "a$b"},
		Env: map[string]string{"A": "${HOME_DIR}/x ${HOME_DIR}"}}
	env := map[string]string{"TOKEN": "t0k", "HOME_DIR": "/h"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	h, err := s.ExpandHeaders(lookup)
	if err != nil || !reflect.DeepEqual(h, map[string]string{"Authorization": "Bearer t0k", "X-Plain": "a$b"}) {
		t.Errorf("ExpandHeaders = %v, %v", h, err)
	}
	e, err := s.ExpandEnv(lookup)
	if err != nil || e["A"] != "/h/x /h" {
		t.Errorf("ExpandEnv = %v, %v", e, err)
	}
	delete(env, "TOKEN")
	_, err = s.ExpandHeaders(lookup)
	if err == nil || err.Error() != `mcp server "issues": headers.Authorization: environment variable TOKEN is not set` {
		t.Errorf("unset variable: %v", err)
	}
}

// TestInvalidServer: a Server built in Go that cannot be started is refused
// at every use with ErrInvalidServer, naming what is wrong, and starts
// nothing.
func TestInvalidServer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		srv  Server
	}{
		{"neither", Server{Name: "s"}},
		{"both", Server{Name: "s", Command: []string{"x"}, URL: "http://127.0.0.1:1/mcp"}},
		{"empty program", Server{Name: "s", Command: []string{""}}},
		{"empty command", Server{Name: "s", Command: []string{}}},
		{"no name", Server{Command: []string{"x"}}},
		{"negative timeout", Server{Name: "s", Command: []string{"x"}, TimeoutSeconds: -1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New(tt.srv, Options{})
			defer s.Close(t.Context())
			if _, err := s.Tools(t.Context()); !errors.Is(err, ErrInvalidServer) {
				t.Errorf("Tools = %v, want ErrInvalidServer", err)
			}
		})
	}
}
