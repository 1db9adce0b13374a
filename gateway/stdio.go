package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxFrameBytes bounds one JSON-RPC message a client sends: over stdio a
// longer line is answered with an error and skipped, over HTTP the body is
// refused (413). A call's arguments are bounded lower, by
// Options.MaxArgsBytes, with an error result the client's model can read.
const MaxFrameBytes = 4 << 20

// ServeStdio runs one session as who over in and out (a client started
// engine gateway as its MCP server) until the client closes in or ctx
// ends; then the session's task finishes. A line that is not JSON, or is
// over MaxFrameBytes, is answered with a JSON-RPC error and skipped: the
// session goes on.
func (g *Gateway) ServeStdio(ctx context.Context, in io.Reader, out io.Writer, who Principal) error {
	w := &lockedWriter{w: out}
	r := &jsonLines{r: bufio.NewReaderSize(in, 64<<10), out: w, log: g.log}
	// The lines reach the transport bounded and whole, one JSON value each.
	t := &sdk.IOTransport{Reader: io.NopCloser(r), Writer: w, MaxLineLength: MaxFrameBytes + 1}
	return g.Serve(ctx, t, who)
}

// lockedWriter serialises the transport's writes (one message each) and
// the parse errors jsonLines answers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (*lockedWriter) Close() error { return nil }

// jsonLines reads the client's lines and passes on those that are JSON;
// it answers the others itself. It reads on its caller's goroutine (the
// transport's reader).
type jsonLines struct {
	r       *bufio.Reader
	out     io.Writer
	log     *slog.Logger
	pending []byte
}

func (j *jsonLines) Read(p []byte) (int, error) {
	for len(j.pending) == 0 {
		line, over, err := j.line()
		if len(bytes.TrimSpace(line)) > 0 || over {
			switch {
			case over:
				j.refuse(-32600, fmt.Sprintf("the message is over the gateway's limit of %d bytes; it was skipped", MaxFrameBytes))
			case !json.Valid(line):
				j.refuse(-32700, "the message is not JSON; it was skipped")
			default:
				j.pending = append(bytes.TrimRight(line, "\r\n"), '\n')
			}
		}
		if err != nil && len(j.pending) == 0 {
			return 0, err
		}
	}
	n := copy(p, j.pending)
	j.pending = j.pending[n:]
	return n, nil
}

// line reads the next line, at most MaxFrameBytes of it; over says a
// longer one was read to its end and dropped.
func (j *jsonLines) line() (line []byte, over bool, err error) {
	for {
		chunk, err := j.r.ReadSlice('\n')
		if !over {
			if len(line)+len(chunk) > MaxFrameBytes {
				over, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, over, err
	}
}

// refuse answers a message that cannot be read with a JSON-RPC error of id
// null, as the specification has it for a parse error.
func (j *jsonLines) refuse(code int, msg string) {
	j.log.Warn("gateway: a client message was refused", "code", code, "reason", msg)
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": code, "message": msg}})
	_, _ = j.out.Write(append(b, '\n'))
}
