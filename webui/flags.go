package webui

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/spf13/pflag"
)

// ListenerFlags are the flags of an HTTP listener that serves the API or
// the fanout's streams: HTTPS, or the word that a TLS-terminating proxy is
// in front, and the stream caps. engine serve, engine ui and
// observer-worker take the same ones, with the same checks.
type ListenerFlags struct {
	TLSCert, TLSKey        string
	BehindProxy            bool
	MaxStreams             int
	MaxStreamsPerPrincipal int
	// Cert is the certificate Check loaded, nil for plain HTTP.
	Cert *tls.Certificate
}

// Bind binds the flags to f; listenFlag names the listener's own flag
// (--http, --listen) in their help.
func (o *ListenerFlags) Bind(f *pflag.FlagSet, listenFlag string) {
	f.StringVar(&o.TLSCert, "http-tls-cert", "", "certificate (PEM) to serve "+listenFlag+" over HTTPS, with --http-tls-key")
	f.StringVar(&o.TLSKey, "http-tls-key", "", "private key (PEM) of --http-tls-cert")
	f.BoolVar(&o.BehindProxy, "behind-tls-proxy", false, "a TLS-terminating proxy is in front: serve plain HTTP beyond loopback")
	f.IntVar(&o.MaxStreams, "max-streams", DefaultMaxStreams, "live streams (server-sent events) served at once, of everyone")
	f.IntVar(&o.MaxStreamsPerPrincipal, "max-streams-per-client", DefaultMaxStreamsPerPrincipal, "live streams served at once to one principal")
}

// Check refuses bad values and a plain listener beyond loopback on addr,
// and loads the certificate, so that a bad file is refused before
// anything listens rather than logged by a server that never serves. Every
// error it returns is bad usage.
func (o *ListenerFlags) Check(listenFlag, addr string) error {
	switch {
	case (o.TLSCert == "") != (o.TLSKey == ""):
		return errors.New("--http-tls-cert and --http-tls-key go together")
	case o.MaxStreams < 1:
		return fmt.Errorf("--max-streams is %d; it must be at least 1", o.MaxStreams)
	case o.MaxStreamsPerPrincipal < 1:
		return fmt.Errorf("--max-streams-per-client is %d; it must be at least 1", o.MaxStreamsPerPrincipal)
	}
	if o.TLSCert != "" {
		c, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return fmt.Errorf("--http-tls-cert / --http-tls-key: %w", err)
		}
		o.Cert = &c
	}
	return CheckListen(listenFlag, addr, o.TLSCert != "", o.BehindProxy, "--http-tls-cert and --http-tls-key", "--behind-tls-proxy")
}

// Limits are the stream caps.
func (o *ListenerFlags) Limits() Limits {
	return Limits{MaxStreams: o.MaxStreams, MaxStreamsPerPrincipal: o.MaxStreamsPerPrincipal}
}
