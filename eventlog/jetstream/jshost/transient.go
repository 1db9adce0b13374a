package jshost

import (
	"context"
	"errors"
	"io"
	"syscall"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// startupTransient reports a start-up error that may pass on its own: no
// server answered, a request timed out, or JetStream said it is between
// leaders or short of peers.
func startupTransient(err error) bool {
	for _, e := range []error{
		context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoServers, nats.ErrNoResponders,
		nats.ErrConnectionClosed, nats.ErrConnectionReconnecting, nats.ErrDisconnected,
		natsjs.ErrNoHeartbeat, syscall.ECONNREFUSED, syscall.ECONNRESET, io.EOF, io.ErrUnexpectedEOF,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	var apiErr *natsjs.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10004, // incomplete results
			10005, // no suitable peers for placement (a node is down)
			10007, // cluster not assigned to this server
			10008, // JetStream system temporarily unavailable
			10009, // cluster can not handle the request (no leader)
			10202: // cluster member change in progress
			return true
		}
	}
	return false
}
