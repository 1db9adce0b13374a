package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

// LevelTrace is the slog level nats-server's protocol trace is logged at. The
// trace (every PUB, MSG and route frame) is only switched on when the Logger's
// handler is enabled at this level.
const LevelTrace = slog.LevelDebug - 4

// serverLog adapts nats-server's printf-style [server.Logger] to slog and, more
// importantly, records the server's first Fatalf. nats-server reports a failed
// start (port in use, unusable store dir) only through Fatalf and then returns
// from Start, leaving the caller waiting for a readiness that never comes; the
// recorded error lets [Start] fail at once with the real cause. It is
// installed even when Config.Logger is nil, with output discarded.
type serverLog struct {
	l *slog.Logger // nil: discard

	once  sync.Once
	fatal chan struct{} // closed on the first Fatalf
	err   error         // set before fatal is closed
}

var _ server.Logger = (*serverLog)(nil)

func newServerLog(l *slog.Logger, serverName string) *serverLog {
	if l != nil {
		l = l.With("component", "nats-server", "server", serverName)
	}
	return &serverLog{l: l, fatal: make(chan struct{})}
}

// levels reports the debug and trace flags for SetLoggerV2: nats-server skips
// formatting of disabled levels itself, which matters for trace.
func (a *serverLog) levels() (debug, trace bool) {
	if a.l == nil {
		return false, false
	}
	ctx := context.Background()
	return a.l.Enabled(ctx, slog.LevelDebug), a.l.Enabled(ctx, LevelTrace)
}

func (a *serverLog) log(level slog.Level, format string, v []any) {
	if a.l == nil || !a.l.Enabled(context.Background(), level) {
		return
	}
	a.l.Log(context.Background(), level, fmt.Sprintf(format, v...))
}

func (a *serverLog) Noticef(format string, v ...any) { a.log(slog.LevelInfo, format, v) }
func (a *serverLog) Warnf(format string, v ...any)   { a.log(slog.LevelWarn, format, v) }
func (a *serverLog) Errorf(format string, v ...any)  { a.log(slog.LevelError, format, v) }
func (a *serverLog) Debugf(format string, v ...any)  { a.log(slog.LevelDebug, format, v) }
func (a *serverLog) Tracef(format string, v ...any)  { a.log(LevelTrace, format, v) }

// Fatalf logs at error level and records the failure; unlike nats-server's own
// logger it never exits the process.
func (a *serverLog) Fatalf(format string, v ...any) {
	a.log(slog.LevelError, "fatal: "+format, v)
	a.once.Do(func() {
		msg := fmt.Sprintf(format, v...)
		// Keep the server's error value (a *net.OpError for a busy port, a
		// *fs.PathError for a bad dir) in the chain so callers can use
		// errors.Is(err, syscall.EADDRINUSE) rather than match text.
		var cause error
		for _, x := range v {
			if e, ok := x.(error); ok {
				cause = e
				break
			}
		}
		a.err = &fatalError{msg: msg, cause: cause}
		close(a.fatal)
	})
}

// fatalErr returns the recorded fatal error, or nil.
func (a *serverLog) fatalErr() error {
	select {
	case <-a.fatal:
		return a.err
	default:
		return nil
	}
}

// fatalError is a Fatalf message; it unwraps to the error among the
// arguments, whose text the message already contains.
type fatalError struct {
	msg   string
	cause error
}

func (e *fatalError) Error() string { return "nats-server: " + e.msg }
func (e *fatalError) Unwrap() error { return e.cause }
