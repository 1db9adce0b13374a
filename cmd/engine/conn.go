package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"
	"github.com/noeta-go/noeta/hostconfig"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/internal/natsconn"
	"github.com/noeta-go/noeta/webui"
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
	batch    string
}

// defaultPrefix is the subject and stream prefix of a deployment.
const defaultPrefix = host.DefaultPrefix

func (c connOpts) embedded() bool { return c.nc.URL == "" }

// check refuses a combination that cannot work, naming the flags.
func (c connOpts) check() error {
	if c.embedded() {
		if err := c.nc.CheckEmbedded(); err != nil {
			return usageErr("%v", err)
		}
		if c.replicas > 1 {
			return usageErr("--replicas %d needs a cluster (--nats): the embedded server is a single node", c.replicas)
		}
	}
	if err := c.nc.Check(); err != nil {
		return usageErr("%v", err)
	}
	if err := noeta.ValidateToken("--prefix", c.prefix, 32); err != nil {
		return usageErr("%v", err)
	}
	if c.replicas < 1 || c.replicas > 5 {
		return usageErr("--replicas is %d, want 1 to 5 (1 on a single node, 3 on a cluster)", c.replicas)
	}
	if _, err := jetstream.ParseBatchMode(c.batch); err != nil {
		return usageErr("--batch is %q, want packed (the default), sequential or atomic", c.batch)
	}
	if c.leaseTTL != 0 && (c.leaseTTL < time.Second || c.leaseTTL%time.Second != 0) {
		return usageErr("--lease-ttl is %v, want whole seconds, at least 1s (it is the leases bucket's TTL)", c.leaseTTL)
	}
	return nil
}

// open opens a host for verb on the deployment of the connection flags;
// o says what it runs. Its errors carry their exit codes: bad options,
// bad config and a data directory another process holds (for a verb that
// runs tasks) are bad usage.
func (g *globals) open(ctx context.Context, verb string, o hostconfig.Options) (*hostconfig.Host, error) {
	if err := g.conn.check(); err != nil {
		return nil, err
	}
	o.NATS = g.conn.nc
	o.Prefix, o.Replicas, o.LeaseTTL = g.conn.prefix, g.conn.replicas, g.conn.leaseTTL
	o.Batch, _ = jetstream.ParseBatchMode(g.conn.batch) // checked above
	if o.Name == "" {
		o.Name = verb
	}
	if o.Logger == nil {
		o.Logger = g.logger()
	}
	if o.Streams == nil && o.Config != nil {
		// The fanout's streams (observers.fanout.listen) are for the
		// config's http: principals only; serve and ui pass the gate their
		// API shares.
		o.Streams = webui.NewGate(o.Config.HTTP, webui.Limits{}).Streams
	}
	if g.conn.embedded() && o.DataDir == "" {
		data, err := g.dataDir()
		if err != nil {
			return nil, err
		}
		o.DataDir = data
		if _, err := os.Stat(data); errors.Is(err, fs.ErrNotExist) && !makesData[verb] {
			// A verb that reads or answers finds nothing in a directory
			// that does not exist, and must not leave one behind.
			return nil, failErr(fmt.Errorf("no data directory %s: nothing has run here (pass --data DIR, or --nats URL for a deployment)", data))
		}
	}
	h, err := hostconfig.Open(ctx, o)
	if err != nil {
		return nil, hostErr(verb, err)
	}
	return h, nil
}

// makesData are the verbs that may start a data directory: those that
// submit or run tasks.
var makesData = map[string]bool{"serve": true, "run": true, "submit": true, "ui": true, "demo": true, "bench": true, "gateway": true}

// hostErr gives an error of hostconfig.Open its exit code.
func hostErr(verb string, err error) error {
	var busy *jshost.BusyError
	switch {
	case errors.As(err, &busy):
		return busyUsage(verb, busy)
	case errors.Is(err, host.ErrBadOptions), errors.Is(err, jshost.ErrBadOptions), errors.Is(err, hostconfig.ErrBadConfig):
		return usageErr("%v", err)
	}
	return failErr(err)
}

// busyUsage is the exit-2 error of a verb that needs the data directory to
// itself.
func busyUsage(verb string, busy *jshost.BusyError) error {
	hint := "stop it or use another --data"
	if busy.Known && busy.Holder.Verb == "serve" {
		hint = "submit to it with 'engine submit', follow with 'engine events --follow', or use another --data"
	}
	return usageErr("%w; engine %s needs the data directory to itself: %s", busy, verb, strings.TrimSpace(hint))
}
