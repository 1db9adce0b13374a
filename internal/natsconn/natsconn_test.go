package natsconn

import (
	"errors"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	cases := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		// A userinfo without a password is a token to nats.go.
		{"nats://s3cr3t-token@127.0.0.1:4222", "nats://xxxxx@127.0.0.1:4222"},
		{"nats://a:1@h1, nats://tok@h2", "nats://a:xxxxx@h1, nats://xxxxx@h2"},
		{"nats://observer:s3cret@127.0.0.1:4222", "nats://observer:xxxxx@127.0.0.1:4222"},
		// Characters url.Parse refuses must not leak the password: the old
		// redaction gave up on a parse error and printed the URL as it was.
		{"nats://observer:pa%zz ss@h:4222", "nats://observer:xxxxx@h:4222"},
		{"nats://o:p@ss/w#rd@h:1", "nats://o:xxxxx@h:1"},
		{"nats://a:1@h1:4222, nats://b:2@h2:4222", "nats://a:xxxxx@h1:4222, nats://b:xxxxx@h2:4222"},
		{"tls://u:p@h", "tls://u:xxxxx@h"},
		{"u:p@h:4222", "u:xxxxx@h:4222"},
	}
	for _, c := range cases {
		if got := RedactURL(c.in); got != c.want {
			t.Errorf("RedactURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestRedactError(t *testing.T) {
	base := errors.New("dial nats://observer:hunter2@10.0.0.1:4222: refused; password hunter2 and pa%21ss")
	o := Options{URL: "nats://observer:hunter2@10.0.0.1:4222,nats://x:pa%21ss@h", Password: "topsecret"}
	err := RedactError(base, o.Secrets()...)
	for _, leak := range []string{"hunter2", "pa%21ss"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("%q leaks %q", err, leak)
		}
	}
	if !errors.Is(err, base) {
		t.Error("the redacted error lost its chain")
	}
	if got := RedactError(errors.New("plain"), "topsecret"); got.Error() != "plain" {
		t.Errorf("got %q", got)
	}
}

// TestConnectErrorHidesPassword: a connection that fails names the servers
// without their passwords. Reproduction of the defect: observer-worker
// printed "connect to nats://observer:PASSWORD@…".
func TestConnectErrorHidesPassword(t *testing.T) {
	o := Options{URL: "nats://observer:s3cr3t-pw@127.0.0.1:1"}
	_, err := o.Connect("test", nil)
	if err == nil {
		t.Fatal("connected to port 1")
	}
	if strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("the error leaks the password: %v", err)
	}
	// nats.go sends a userinfo without a password as a token: engine
	// tasks --nats nats://TOKEN@127.0.0.1:1 printed the token.
	o = Options{URL: "nats://s3cr3t-token@127.0.0.1:1"}
	if _, err = o.Connect("test", nil); err == nil || strings.Contains(err.Error(), "s3cr3t-token") {
		t.Fatalf("error %v", err)
	}
	o = Options{URL: "nats://127.0.0.1:1", User: "u", Password: "s3cr3t-pw"}
	if _, err = o.Connect("test", nil); err == nil || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("error %v", err)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"ok", Options{URL: "nats://h", User: "u", Password: "p"}, ""},
		{"creds and user", Options{Creds: "x", User: "u"}, "two ways"},
		{"password alone", Options{Password: "p"}, "--password needs --user"},
		{"cert without key", Options{TLSCert: "c"}, "go together"},
		{"missing creds", Options{Creds: dir + "/none"}, "--creds"},
		{"creds is a directory", Options{Creds: dir}, "not a regular file"},
	}
	for _, c := range cases {
		err := c.o.Check()
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrUsage) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

// TestCheckEmbedded: an embedded server takes no credentials or TLS, and
// the refusal names the flag.
func TestCheckEmbedded(t *testing.T) {
	tests := []struct {
		o    Options
		flag string
	}{
		{Options{}, ""},
		{Options{Creds: "x.creds"}, "--creds"},
		{Options{User: "alice"}, "--user"},
		{Options{Password: "pw"}, "--password"},
		{Options{TLSCA: "ca.pem"}, "--tls-ca"},
		{Options{TLSCert: "c.pem", TLSKey: "k.pem"}, "--tls-cert"},
		{Options{TLSKey: "k.pem"}, "--tls-key"},
	}
	for _, tt := range tests {
		err := tt.o.CheckEmbedded()
		if tt.flag == "" {
			if err != nil {
				t.Errorf("%+v: %v", tt.o, err)
			}
			continue
		}
		if !errors.Is(err, ErrUsage) || err.Error() != tt.flag+" needs --nats: the embedded server (no --nats) takes no credentials or TLS" {
			t.Errorf("%+v: %v, want the refusal naming %s", tt.o, err, tt.flag)
		}
	}
}
