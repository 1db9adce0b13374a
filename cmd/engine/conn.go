package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// connOpts say where the event log and the dispatcher live: the embedded
// server on --data (no --nats), or a NATS server or cluster, with its
// credentials and TLS. Every verb takes them.
type connOpts struct {
	url      string
	creds    string
	user     string
	password string
	tlsCA    string
	tlsCert  string
	tlsKey   string
	prefix   string
	replicas int
	leaseTTL time.Duration
}

// defaultPrefix is the subject and stream prefix of a deployment.
const defaultPrefix = "noeta"

// reconnectWait is the pause between two reconnection attempts to NATS; a
// connection retries for ever.
const reconnectWait = time.Second

func (c connOpts) embedded() bool { return c.url == "" }

// check refuses a combination that cannot work, naming the flags.
func (c connOpts) check() error {
	if c.embedded() {
		for _, f := range []struct{ flag, v string }{
			{"--creds", c.creds}, {"--user", c.user}, {"--password", c.password},
			{"--tls-ca", c.tlsCA}, {"--tls-cert", c.tlsCert}, {"--tls-key", c.tlsKey},
		} {
			if f.v != "" {
				return usageErr("%s needs --nats: the embedded server (no --nats) takes no credentials or TLS", f.flag)
			}
		}
		if c.replicas > 1 {
			return usageErr("--replicas %d needs a cluster (--nats): the embedded server is a single node", c.replicas)
		}
	}
	if c.creds != "" && (c.user != "" || c.password != "") {
		return usageErr("--creds and --user/--password are two ways to authenticate: give one")
	}
	if c.password != "" && c.user == "" {
		return usageErr("--password needs --user")
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return usageErr("--tls-cert and --tls-key go together: a client certificate needs its key")
	}
	for _, f := range []struct{ flag, path string }{
		{"--creds", c.creds}, {"--tls-ca", c.tlsCA}, {"--tls-cert", c.tlsCert}, {"--tls-key", c.tlsKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return usageErr("%s: %v", f.flag, err)
		}
	}
	if err := noeta.ValidateToken("--prefix", c.prefix, 32); err != nil {
		return usageErr("%v", err)
	}
	if c.replicas < 1 || c.replicas > 5 {
		return usageErr("--replicas is %d, want 1 to 5 (1 on a single node, 3 on a cluster)", c.replicas)
	}
	if c.leaseTTL != 0 && (c.leaseTTL < time.Second || c.leaseTTL%time.Second != 0) {
		return usageErr("--lease-ttl is %v, want whole seconds, at least 1s (it is the leases bucket's TTL)", c.leaseTTL)
	}
	return nil
}

// natsOptions are the options of a connection to c.url: it reconnects for
// ever, and logs its disconnections and reconnections.
func (c connOpts) natsOptions(name string, logger *slog.Logger) []nats.Option {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				logger.Warn("disconnected from NATS; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("reconnected to NATS", "server", redactURL(nc.ConnectedUrl()))
		}),
	}
	switch {
	case c.creds != "":
		opts = append(opts, nats.UserCredentials(c.creds))
	case c.user != "":
		opts = append(opts, nats.UserInfo(c.user, c.password))
	}
	if c.tlsCA != "" {
		opts = append(opts, nats.RootCAs(c.tlsCA))
	}
	if c.tlsCert != "" {
		opts = append(opts, nats.ClientCert(c.tlsCert, c.tlsKey))
	}
	return opts
}

// flags names the deployment in messages, as the flags that reach it again.
func (c connOpts) flags(data string) string {
	var s string
	if c.embedded() {
		s = "--data " + data
	} else {
		s = "--nats " + redactURL(c.url)
	}
	if c.prefix != defaultPrefix {
		s += " --prefix " + c.prefix
	}
	return s
}

// redactURL hides the passwords of a comma-separated list of server URLs.
func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// describe is a one-line description of the connection for logs.
func (c connOpts) describe() string {
	if c.embedded() {
		return "embedded"
	}
	s := redactURL(c.url)
	switch {
	case c.creds != "":
		s += " (creds " + c.creds + ")"
	case c.user != "":
		s += " (user " + c.user + ")"
	}
	return s
}

// leaseTTLHint adds a hint to the error of a dispatcher or log that found
// its buckets made with another TTL or replica count.
func leaseTTLHint(err error) error {
	if errors.Is(err, jetstream.ErrConfigMismatch) {
		return fmt.Errorf("%w\n(every process of one prefix must use the same --lease-ttl and --replicas)", err)
	}
	return err
}
