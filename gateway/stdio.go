package gateway

import (
	"context"
	"io"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxFrameBytes bounds one JSON-RPC message a client sends over stdio: a
// longer line ends the session (the transport cannot skip it and stay in
// step). A call's arguments are bounded lower, by Options.MaxArgsBytes,
// with an error result the client's model can read.
const MaxFrameBytes = 4 << 20

// ServeStdio runs one session as who over in and out (a client started
// engine gateway as its MCP server) until the client closes in or ctx
// ends; then the session's task finishes.
func (g *Gateway) ServeStdio(ctx context.Context, in io.Reader, out io.Writer, who Principal) error {
	t := &sdk.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}, MaxLineLength: MaxFrameBytes}
	return g.Serve(ctx, t, who)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
