package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Observers is the observers: section of noeta.yaml: the observers a
// process that runs tasks runs in process, beside the hooks: section. A nil
// field is a section not given.
//
//	observers:
//	  audit: {file: audit.jsonl}           # or {stdout: true}, or {subject: noeta.audit}
//	  metrics: {listen: "127.0.0.1:9464"}  # serves /metrics
//	  trace: {otlp_endpoint: "localhost:4317", protocol: grpc, insecure: true}
//	  fanout: {}                           # SSE on the host's HTTP listener, or {listen: ADDR}
type Observers struct {
	// Audit writes a hash-chained audit trail of the records.
	Audit *Audit
	// Metrics serves the records' metrics to Prometheus.
	Metrics *Metrics
	// Trace exports OpenTelemetry spans of the records.
	Trace *Trace
	// Fanout streams a task's records to HTTP clients as they commit.
	Fanout *Fanout
}

// Empty reports whether the section configures nothing.
func (o Observers) Empty() bool {
	return o.Audit == nil && o.Metrics == nil && o.Trace == nil && o.Fanout == nil
}

// Audit is observers.audit: exactly one of its fields is set.
type Audit struct {
	// File is a JSON Lines file, relative to the working directory.
	File string
	// Stdout writes the records to standard output.
	Stdout bool
	// Subject publishes each record on <Subject>.<task>.
	Subject string
}

// Metrics is observers.metrics.
type Metrics struct {
	// Listen is the host:port /metrics is served on (required).
	Listen string
}

// Trace is observers.trace: spans exported over OTLP.
type Trace struct {
	// Endpoint is otlp_endpoint (required): host:port, or an http:// or
	// https:// URL.
	Endpoint string
	// Protocol is grpc (the default) or http (OTLP/HTTP protobuf).
	Protocol string
	// Insecure disables TLS.
	Insecure bool
}

// Fanout is observers.fanout: the records as server-sent events.
type Fanout struct {
	// Listen is a host:port of its own; "" serves it on the host's HTTP
	// listener.
	Listen string
}

// Trace protocols.
const (
	TraceGRPC = "grpc"
	TraceHTTP = "http"
)

func (d *decoder) observers(n *yaml.Node, path string) Observers {
	var o Observers
	f, ok := d.fields(n, path, "audit", "metrics", "trace", "fanout")
	if !ok && f == nil {
		return o
	}
	if n := f["metrics"]; !isNull(n) {
		o.Metrics = d.metrics(n, join(path, "metrics"))
	}
	if n := f["trace"]; !isNull(n) {
		o.Trace = d.trace(n, join(path, "trace"))
	}
	if n := f["fanout"]; !isNull(n) {
		o.Fanout = d.fanout(n, join(path, "fanout"))
	}
	if n := f["audit"]; !isNull(n) {
		o.Audit = d.audit(n, join(path, "audit"))
	}
	return o
}

func (d *decoder) audit(an *yaml.Node, ap string) *Audit {
	af, ok := d.fields(an, ap, "file", "stdout", "subject")
	if !ok && af == nil {
		// Refused already; a placeholder keeps "no audit" from being read
		// as the user's choice.
		return &Audit{}
	}
	a := &Audit{}
	// A sink counts as given when its key is, even with a value refused
	// below: that error says what is wrong, not "no sink".
	var set []string
	for _, k := range []string{"file", "stdout", "subject"} {
		if v, given := af[k]; given && !isNull(v) {
			set = append(set, k)
		}
	}
	if s, ok := d.str(af["file"], join(ap, "file")); ok {
		a.File = s
		if s == "" {
			d.errs.add(join(ap, "file"), "must not be empty")
		}
	}
	if b, ok := d.boolean(af["stdout"], join(ap, "stdout")); ok {
		if !b {
			d.errs.add(join(ap, "stdout"), "must be true, or left out")
		}
		a.Stdout = b
	}
	if s, ok := d.str(af["subject"], join(ap, "subject")); ok {
		a.Subject = s
		if s == "" {
			d.errs.add(join(ap, "subject"), "must not be empty")
		}
	}
	if len(set) != 1 && ok {
		if len(set) == 0 {
			d.errs.add(ap, "needs exactly one sink: file, stdout or subject")
		} else {
			d.errs.addf(ap, "needs exactly one sink, has %s", strings.Join(set, " and "))
		}
	}
	return a
}

func (d *decoder) metrics(n *yaml.Node, path string) *Metrics {
	m := &Metrics{}
	f, ok := d.fields(n, path, "listen")
	if !ok && f == nil {
		return m // refused already
	}
	lp := join(path, "listen")
	if s, ok := d.str(f["listen"], lp); ok {
		m.Listen = s
		d.checkListen(s, lp)
	} else if isNull(f["listen"]) {
		d.errs.add(lp, "required: the host:port to serve /metrics on")
	}
	return m
}

func (d *decoder) trace(n *yaml.Node, path string) *Trace {
	t := &Trace{Protocol: TraceGRPC}
	f, ok := d.fields(n, path, "otlp_endpoint", "protocol", "insecure")
	if !ok && f == nil {
		return t // refused already
	}
	ep := join(path, "otlp_endpoint")
	if s, ok := d.str(f["otlp_endpoint"], ep); ok {
		t.Endpoint = s
		if err := checkEndpoint(s); err != nil {
			d.errs.addf(ep, "%q: %v", s, err)
		}
	} else if isNull(f["otlp_endpoint"]) {
		d.errs.add(ep, "required: the OTLP collector, host:port or an http(s):// URL")
	}
	if s, ok := d.str(f["protocol"], join(path, "protocol")); ok {
		if s != TraceGRPC && s != TraceHTTP {
			d.errs.addf(join(path, "protocol"), "must be grpc or http, not %q", s)
		}
		t.Protocol = s
	}
	t.Insecure, _ = d.boolean(f["insecure"], join(path, "insecure"))
	return t
}

func (d *decoder) fanout(n *yaml.Node, path string) *Fanout {
	fo := &Fanout{}
	f, ok := d.fields(n, path, "listen")
	if !ok && f == nil {
		return fo // refused already
	}
	lp := join(path, "listen")
	if s, ok := d.str(f["listen"], lp); ok {
		fo.Listen = s
		d.checkListen(s, lp)
	}
	return fo
}

// checkListen reports a listen address that is not host:port with a port
// number.
func (d *decoder) checkListen(s, path string) {
	if err := checkHostPort(s); err != nil {
		d.errs.addf(path, "%q: %v", s, err)
	}
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("must be host:port (\":9464\" for every interface)")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || (n == 0 && port != "0") {
		return fmt.Errorf("the port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// checkEndpoint accepts host:port, or an http:// or https:// URL with a host.
func checkEndpoint(s string) error {
	if !strings.Contains(s, "://") {
		return checkHostPort(s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("the scheme must be http or https, not %q", u.Scheme)
	}
	if u.Host == "" {
		return errors.New("the URL has no host")
	}
	return nil
}

// boolean reads a bool; null is absent.
func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	if n = d.enter(n, path); isNull(n) {
		return false, false
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.errs.addf(path, "must be true or false, not %s", kindName(n))
		return false, false
	}
	return v, true
}
