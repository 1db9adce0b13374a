// Package natsconn is how every noeta binary connects to a NATS server or
// cluster: one set of connection settings (URLs, a credentials file or a
// user and password, TLS), their checks, the nats.go options built from them,
// and the redaction that keeps a password out of every message, log line and
// error a binary prints.
package natsconn

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/noeta-go/noeta/internal/redact"
)

// ErrUsage marks a combination of settings that cannot work; the message
// names the flags.
var ErrUsage = errors.New("natsconn: bad connection settings")

// usageError is an ErrUsage whose message is only what is wrong.
type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

func usage(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// Options are the connection settings. Flags name them --nats, --creds,
// --user, --password, --tls-ca, --tls-cert and --tls-key, and the
// environment NOETA_NATS, NOETA_CREDS, NOETA_USER, NOETA_PASSWORD,
// NOETA_TLS_CA, NOETA_TLS_CERT and NOETA_TLS_KEY.
type Options struct {
	URL      string // comma-separated server URLs
	Creds    string // a credentials file (JWT and NKey seed)
	User     string
	Password string
	TLSCA    string
	TLSCert  string
	TLSKey   string
}

// EnvVars maps each setting's flag name to its environment variable.
var EnvVars = map[string]string{
	"nats":     "NOETA_NATS",
	"creds":    "NOETA_CREDS",
	"user":     "NOETA_USER",
	"password": "NOETA_PASSWORD",
	"tls-ca":   "NOETA_TLS_CA",
	"tls-cert": "NOETA_TLS_CERT",
	"tls-key":  "NOETA_TLS_KEY",
}

// BindFlags defines the connection flags on fs, writing into o; natsHelp
// is --nats's help, which differs by binary.
func (o *Options) BindFlags(fs *pflag.FlagSet, natsHelp string) {
	fs.StringVar(&o.URL, "nats", "", natsHelp+"; put no password in it, where ps shows it")
	fs.StringVar(&o.Creds, "creds", "", "NATS credentials file (JWT and NKey seed)")
	fs.StringVar(&o.User, "user", "", "NATS user")
	fs.StringVar(&o.Password, "password", "", "NATS password of --user (better: NOETA_PASSWORD, which ps does not show)")
	fs.StringVar(&o.TLSCA, "tls-ca", "", "CA certificates (PEM) to verify the NATS servers with")
	fs.StringVar(&o.TLSCert, "tls-cert", "", "client certificate (PEM) for mutual TLS; with --tls-key")
	fs.StringVar(&o.TLSKey, "tls-key", "", "key (PEM) of --tls-cert")
}

// Check refuses a combination that cannot work, naming the flags. It does
// not require a URL: the caller decides whether one is needed.
func (o Options) Check() error {
	if o.Creds != "" && (o.User != "" || o.Password != "") {
		return usage("--creds and --user/--password are two ways to authenticate: give one")
	}
	if o.Password != "" && o.User == "" {
		return usage("--password needs --user")
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return usage("--tls-cert and --tls-key go together: a client certificate needs its key")
	}
	for _, f := range []struct{ flag, path string }{
		{"--creds", o.Creds}, {"--tls-ca", o.TLSCA}, {"--tls-cert", o.TLSCert}, {"--tls-key", o.TLSKey},
	} {
		if f.path == "" {
			continue
		}
		fi, err := os.Stat(f.path)
		if err != nil {
			return usage("%s: %v", f.flag, err)
		}
		if !fi.Mode().IsRegular() {
			return usage("%s %s is not a regular file", f.flag, f.path)
		}
	}
	return nil
}

// CheckEmbedded refuses what an embedded server (no URL) cannot take:
// credentials and TLS are for a server reached over the network.
func (o Options) CheckEmbedded() error {
	for _, f := range []struct{ flag, v string }{
		{"--creds", o.Creds}, {"--user", o.User}, {"--password", o.Password},
		{"--tls-ca", o.TLSCA}, {"--tls-cert", o.TLSCert}, {"--tls-key", o.TLSKey},
	} {
		if f.v != "" {
			return usage("%s needs --nats: the embedded server (no --nats) takes no credentials or TLS", f.flag)
		}
	}
	return nil
}

// reconnectWait is the pause between two reconnection attempts; a
// connection retries for ever.
const reconnectWait = time.Second

// NATSOptions are the nats.go options of a connection named name: it
// authenticates as configured, reconnects for ever, and logs its
// disconnections and reconnections (with the server's URL redacted).
func (o Options) NATSOptions(name string, logger *slog.Logger) []nats.Option {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				logger.Warn("disconnected from NATS; reconnecting", "err", RedactError(err, o.Secrets()...))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("reconnected to NATS", "server", RedactURL(nc.ConnectedUrl()))
		}),
	}
	switch {
	case o.Creds != "":
		opts = append(opts, nats.UserCredentials(o.Creds))
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	return opts
}

// Connect connects with NATSOptions. Its error names the servers (redacted)
// and never carries a password.
func (o Options) Connect(name string, logger *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(o.URL, append(o.NATSOptions(name, logger), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", o.Describe(), RedactError(err, o.Secrets()...))
	}
	return nc, nil
}

// Describe is a one-line description of the connection for messages and
// logs: the servers with their passwords hidden, and how it authenticates.
func (o Options) Describe() string {
	s := RedactURL(o.URL)
	switch {
	case o.Creds != "":
		s += " (creds " + o.Creds + ")"
	case o.User != "":
		s += " (user " + o.User + ")"
	}
	return s
}

// Secrets are the strings no message may carry: the password, and the
// passwords and tokens inside the URLs.
func (o Options) Secrets() []string {
	s := urlPasswords(o.URL)
	if o.Password != "" {
		s = append(s, o.Password)
	}
	return s
}

// redacted stands where a password was.
const redacted = "xxxxx"

// RedactURL hides the password of every URL in a comma-separated list, and
// a userinfo without a password whole: nats.go sends that as a token
// (nats://TOKEN@host). It does not rely on the URL parsing: a password with
// characters a URL may not hold is hidden too, since everything between
// "://" and the last "@" of the authority but the user name is the password.
func RedactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

// userinfo returns where the userinfo of one URL starts and ends, and where
// its password starts (-1 without one); ok is false without a userinfo.
func userinfo(u string) (start, end, pw int, ok bool) {
	start = 0
	if i := strings.Index(u, "://"); i >= 0 {
		start = i + 3
	}
	rest := u[start:]
	// The authority ends at the first '/', '?' or '#' after the last '@':
	// a password may itself hold those characters, so the '@' decides.
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return 0, 0, -1, false
	}
	end = start + at
	pw = -1
	if c := strings.Index(u[start:end], ":"); c >= 0 {
		pw = start + c + 1
	}
	return start, end, pw, true
}

func redactOne(u string) string {
	start, end, pw, ok := userinfo(u)
	switch {
	case !ok:
		return u
	case pw < 0:
		return u[:start] + redacted + u[end:] // a token
	}
	return u[:pw] + redacted + u[end:]
}

// urlPasswords are the passwords, and the tokens, inside a comma-separated
// list of URLs, raw and unescaped.
func urlPasswords(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		start, end, pw, ok := userinfo(p)
		if pw < 0 {
			pw = start // no password: the userinfo is a token
		}
		if !ok || pw == end {
			continue
		}
		raw := p[pw:end]
		out = append(out, raw)
		if un, err := url.PathUnescape(raw); err == nil && un != raw {
			out = append(out, un)
		}
	}
	return out
}

// RedactError returns err with every occurrence of the secrets and every
// URL password in its message hidden; errors.Is and errors.As still see the
// original chain.
func RedactError(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := RedactText(err.Error(), secrets...)
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// RedactText hides the secrets, and the password of anything shaped like a
// URL with userinfo, in s.
func RedactText(s string, secrets ...string) string {
	s = redact.Secrets(s, redacted, secrets...)
	fields := strings.Fields(s)
	for _, f := range fields {
		if strings.Contains(f, "://") && strings.Contains(f, "@") {
			if r := RedactURL(f); r != f {
				s = strings.ReplaceAll(s, f, r)
			}
		}
	}
	return s
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
