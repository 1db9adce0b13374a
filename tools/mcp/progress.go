package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/noeta-go/noeta/tools"
)

// A server's progress is routed as its notification is read off the
// connection, not by the SDK's notification handler: the SDK queues a
// notification for a handler goroutine but hands a call its response
// straight from the reader, so a handler could still be holding the last
// progress a server sent before its result when the call had returned
// (and the gateway had passed its client the result: that progress was
// lost). Routed in the reader, every progress sent before a result has
// reached its call's Progress when the call returns.

// progressMethod is the notification a server reports progress with.
const progressMethod = "notifications/progress"

// maxProgressFrame bounds what is buffered of one server-sent event to
// look for progress in: a progress notification is small, and a bigger
// event (a result) is the SDK's to read and bound.
const maxProgressFrame = 64 << 10

// routeProgress hands a progress notification's params to the call in
// flight that sent its token; a token no call in flight sent is dropped.
func (s *Source) routeProgress(params json.RawMessage) {
	var p sdk.ProgressNotificationParams
	if json.Unmarshal(params, &p) != nil {
		return
	}
	tok, ok := p.ProgressToken.(string)
	if !ok {
		return
	}
	if f, ok := s.progress.Load(tok); ok {
		f.(tools.Progress)(p.Progress, p.Total, p.Message)
	}
}

// routeMessage routes msg if it is a progress notification.
func (s *Source) routeMessage(msg jsonrpc.Message) {
	if r, ok := msg.(*jsonrpc.Request); ok && !r.IsCall() && r.Method == progressMethod {
		s.routeProgress(r.Params)
	}
}

// progressTransport is a stdio transport whose connection routes progress
// as it reads it.
type progressTransport struct {
	sdk.Transport
	src *Source
}

func (t progressTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return progressConn{Connection: c, src: t.src}, nil
}

type progressConn struct {
	sdk.Connection
	src *Source
}

func (c progressConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err == nil {
		c.src.routeMessage(msg)
	}
	return msg, err
}

// sseProgress passes a url server's event stream through, routing each
// progress notification in it as the SDK reads past it. (The streamable
// client's connection cannot be wrapped as a stdio one is: the SDK tells
// it of the session through a method only its own types can have.)
type sseProgress struct {
	rc  io.ReadCloser
	src *Source

	line []byte // the line read so far, up to the bound
	data []byte // the event's data lines so far
	long bool   // the event went over the bound: not looked at
	cr   bool   // the last byte was a CR (a CRLF is one line end)
}

func (b *sseProgress) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.scan(p[:n])
	return n, err
}

func (b *sseProgress) Close() error { return b.rc.Close() }

// scan takes the stream's next bytes, ending lines at CR, LF or CRLF as
// server-sent events do.
func (b *sseProgress) scan(p []byte) {
	for len(p) > 0 {
		if b.cr {
			b.cr = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			b.add(p)
			return
		}
		b.add(p[:i])
		b.cr = p[i] == '\r'
		p = p[i+1:]
		b.endLine()
	}
}

func (b *sseProgress) add(p []byte) {
	if b.long || len(b.line)+len(p) > maxProgressFrame {
		b.long = true
		return
	}
	b.line = append(b.line, p...)
}

// endLine takes a whole line: a data field is kept, an empty line ends
// the event, and anything else (comments, event names, ids) is passed by.
func (b *sseProgress) endLine() {
	line := b.line
	b.line = b.line[:0]
	if len(line) == 0 && !b.long {
		if len(b.data) > 0 {
			b.event(b.data[:len(b.data)-1]) // the last data line's LF is not the data's
		}
		b.data = b.data[:0]
		return
	}
	if len(line) == 0 { // a blank line after a line over the bound
		b.long = false
		b.data = b.data[:0]
		return
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	if string(name) != "data" || b.long {
		return
	}
	value = bytes.TrimPrefix(value, []byte(" "))
	if len(b.data)+len(value)+1 > maxProgressFrame {
		b.long = true
		return
	}
	b.data = append(append(b.data, value...), '\n')
}

func (b *sseProgress) event(data []byte) {
	if !bytes.Contains(data, []byte(progressMethod)) {
		return
	}
	if msg, err := jsonrpc.DecodeMessage(data); err == nil {
		b.src.routeMessage(msg)
	}
}
