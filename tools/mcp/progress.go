package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"

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
	if r, ok := s.progress.Load(tok); ok {
		r.(*progressRoute).tell(p.Progress, p.Total, p.Message)
	}
}

// progressRoute is a call's Progress while the call runs: once end has
// returned (the call is over, whether by its result or its context), it is
// told nothing more.
type progressRoute struct {
	mu   sync.Mutex
	p    tools.Progress
	done bool
}

func (r *progressRoute) tell(progress, total float64, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done {
		r.p(progress, total, message)
	}
}

func (r *progressRoute) end() {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
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
// it of the session through a method only its own types can have.) It
// reads events as the SDK's scanner does (go-sdk v1.8.0, event.go): lines
// end at LF, with trailing CRs trimmed; data fields are trimmed and joined
// by LF; an empty line or the end of the stream ends an event; an event
// named other than "message" is not a message. An event over
// maxProgressFrame is not looked at.
type sseProgress struct {
	rc  io.ReadCloser
	src *Source

	line    []byte // the line read so far, up to the bound
	lineLen int    // the line's bytes so far, kept or not
	name    string // the event's name
	data    []byte // its data fields, joined
	hasData bool
	long    bool // the event went over the bound: not looked at
	eof     bool
}

func (b *sseProgress) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.scan(p[:n])
	if err == io.EOF && !b.eof {
		// The SDK takes a last line and event the stream did not end.
		b.eof = true
		if b.lineLen > 0 {
			b.endLine()
		}
		b.endEvent()
	}
	return n, err
}

func (b *sseProgress) Close() error { return b.rc.Close() }

func (b *sseProgress) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			b.add(p)
			return
		}
		b.add(p[:i])
		p = p[i+1:]
		b.endLine()
	}
}

func (b *sseProgress) add(p []byte) {
	b.lineLen += len(p)
	if b.lineLen > maxProgressFrame {
		b.long = true // a line over the bound takes its event with it
		return
	}
	b.line = append(b.line, p...)
}

// endLine takes a whole line: an empty one ends the event; an event name
// and data fields are kept; anything else (comments, ids) is passed by.
func (b *sseProgress) endLine() {
	over := b.lineLen > maxProgressFrame
	line := bytes.TrimRight(b.line, "\r\n")
	b.line, b.lineLen = b.line[:0], 0
	if !over && len(line) == 0 {
		b.endEvent()
		return
	}
	if b.long {
		return
	}
	field, value, ok := bytes.Cut(line, []byte(":"))
	if !ok {
		return // the SDK fails the stream on it
	}
	switch string(field) {
	case "event":
		b.name = string(bytes.TrimSpace(value))
	case "data":
		if b.hasData {
			b.data = append(b.data, '\n')
		}
		b.data, b.hasData = append(b.data, bytes.TrimSpace(value)...), true
		if len(b.data) > maxProgressFrame {
			b.long = true
		}
	}
}

func (b *sseProgress) endEvent() {
	if !b.long && b.hasData && (b.name == "" || b.name == "message") {
		// Every message is decoded, not only those that spell the method
		// plainly: JSON may escape it ("notifications\/progress").
		if msg, err := jsonrpc.DecodeMessage(b.data); err == nil {
			b.src.routeMessage(msg)
		}
	}
	b.data, b.hasData, b.name, b.long = b.data[:0], false, "", false
}
