package main

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/internal/natsconn"
)

// connOpts say where the event log and the dispatcher live: the embedded
// server on --data (no --nats), or a NATS server or cluster, with its
// credentials and TLS. Every verb takes them.
type connOpts struct {
	// nc are the connection settings proper (URLs, credentials, TLS),
	// the same as observer-worker's.
	nc       natsconn.Options
	prefix   string
	replicas int
	leaseTTL time.Duration
	// attached is set when the connection goes to the embedded server of
	// another process that holds the data directory (claimDataDir).
	attached *attachment
}

// defaultPrefix is the subject and stream prefix of a deployment.
const defaultPrefix = "noeta"

func (c connOpts) embedded() bool { return c.nc.URL == "" }

// check refuses a combination that cannot work, naming the flags.
func (c connOpts) check() error {
	if c.embedded() {
		for _, f := range []struct{ flag, v string }{
			{"--creds", c.nc.Creds}, {"--user", c.nc.User}, {"--password", c.nc.Password},
			{"--tls-ca", c.nc.TLSCA}, {"--tls-cert", c.nc.TLSCert}, {"--tls-key", c.nc.TLSKey},
		} {
			if f.v != "" {
				return usageErr("%s needs --nats: the embedded server (no --nats) takes no credentials or TLS", f.flag)
			}
		}
		if c.replicas > 1 {
			return usageErr("--replicas %d needs a cluster (--nats): the embedded server is a single node", c.replicas)
		}
	}
	if err := c.nats().Check(); err != nil {
		return usageErr("%v", err)
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

// nats are the connection settings proper, shared with observer-worker.
func (c connOpts) nats() natsconn.Options {
	return c.nc
}

// connect connects to the configured servers; the error never carries a password.
func (c connOpts) connect(name string, logger *slog.Logger) (*nats.Conn, error) {
	return c.nats().Connect(name, logger)
}

// flags names the deployment in messages, as the flags that reach it again.
func (c connOpts) flags(data string) string {
	var s string
	if c.embedded() || c.attached != nil {
		s = "--data " + data
	} else {
		s = "--nats " + redactURL(c.nc.URL)
	}
	if c.prefix != defaultPrefix {
		s += " --prefix " + c.prefix
	}
	return s
}

// redactURL hides the passwords of a comma-separated list of server URLs.
func redactURL(s string) string { return natsconn.RedactURL(s) }

// describe is a one-line description of the connection for logs.
func (c connOpts) describe() string {
	if c.embedded() {
		return "embedded"
	}
	if c.attached != nil {
		return fmt.Sprintf("the embedded server of %v on %s", c.attached.holder, c.attached.dir)
	}
	return c.nats().Describe()
}

// leaseTTLHint adds a hint to the error of a dispatcher or log that found
// its buckets made with another TTL or replica count.
func leaseTTLHint(err error) error {
	if errors.Is(err, jetstream.ErrConfigMismatch) {
		return fmt.Errorf("%w\n(every process of one prefix must use the same --lease-ttl and --replicas)", err)
	}
	return err
}
