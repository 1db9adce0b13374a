package main

import (
	"crypto/tls"

	"github.com/spf13/pflag"

	"github.com/noeta-go/noeta/webui"
)

// webOpts are the flags of an HTTP listener that serves the API: HTTPS, or
// the word that a TLS-terminating proxy is in front, and the stream caps.
type webOpts struct {
	tlsCert, tlsKey   string
	behindProxy       bool
	maxStreams        int
	maxStreamsPerUser int
	cert              *tls.Certificate // loaded by check
}

func (o *webOpts) bindFlags(f *pflag.FlagSet, listenFlag string) {
	f.StringVar(&o.tlsCert, "http-tls-cert", "", "certificate (PEM) to serve "+listenFlag+" over HTTPS, with --http-tls-key")
	f.StringVar(&o.tlsKey, "http-tls-key", "", "private key (PEM) of --http-tls-cert")
	f.BoolVar(&o.behindProxy, "behind-tls-proxy", false, "a TLS-terminating proxy is in front: serve plain HTTP beyond loopback")
	f.IntVar(&o.maxStreams, "max-streams", webui.DefaultMaxStreams, "live streams (server-sent events) served at once, of everyone")
	f.IntVar(&o.maxStreamsPerUser, "max-streams-per-client", webui.DefaultMaxStreamsPerPrincipal, "live streams served at once to one principal")
}

// check refuses bad values and a plain listener beyond loopback; exit 2.
func (o *webOpts) check(listenFlag, addr string) error {
	switch {
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return usageErr("--http-tls-cert and --http-tls-key go together")
	case o.maxStreams < 1:
		return usageErr("--max-streams is %d; it must be at least 1", o.maxStreams)
	case o.maxStreamsPerUser < 1:
		return usageErr("--max-streams-per-client is %d; it must be at least 1", o.maxStreamsPerUser)
	}
	if o.tlsCert != "" {
		// Loaded now, so a bad file is a usage error before anything
		// listens, not a log line from a server that never serves.
		c, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return usageErr("--http-tls-cert / --http-tls-key: %v", err)
		}
		o.cert = &c
	}
	if err := webui.CheckListen(listenFlag, addr, o.tlsCert != "", o.behindProxy, "--http-tls-cert and --http-tls-key", "--behind-tls-proxy"); err != nil {
		return usageErr("%v", err)
	}
	return nil
}

func (o *webOpts) limits() webui.Limits {
	return webui.Limits{MaxStreams: o.maxStreams, MaxStreamsPerPrincipal: o.maxStreamsPerUser}
}
