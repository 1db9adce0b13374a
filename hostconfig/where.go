package hostconfig

import (
	"fmt"

	"github.com/noeta-go/noeta/internal/natsconn"
)

// Where names the deployment of h in a message: its data directory, or
// the NATS servers it is connected to.
func (h *Host) Where() string {
	if h.Embedded() {
		return "data " + h.DataDir()
	}
	return "nats " + h.Describe()
}

// Flags are the engine command's flags that reach h's deployment again,
// for a hint a person can paste: --data DIR, or --nats URL (passwords
// hidden), and --prefix when it is not the default.
func (h *Host) Flags() string {
	var s string
	if h.Embedded() {
		s = "--data " + h.DataDir()
	} else {
		s = "--nats " + natsconn.RedactURL(h.opts.NATS.URL)
	}
	if p := h.opts.Prefix; p != "" && p != DefaultPrefix {
		s += " --prefix " + p
	}
	return s
}

// Describe is a one-line description of h's connection for logs: the
// embedded server (its own, or the one of the process that holds its data
// directory), or the NATS servers with the user (passwords hidden).
func (h *Host) Describe() string {
	if holder, ok := h.Attached(); ok {
		return fmt.Sprintf("the embedded server of %v on %s", holder, h.DataDir())
	}
	if h.Embedded() {
		return "embedded"
	}
	return h.opts.NATS.Describe()
}
