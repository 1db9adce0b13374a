package tools

import "context"

// Progress is told a running call's progress as its tool reports it (an
// MCP server's notifications/progress): progress increases, total is 0
// when unknown. It may be called on the goroutine that reads the tool's
// connection (an MCP server's), so it must not block and must not call
// back into the tool; it is not called once the call has returned.
type Progress func(progress, total float64, message string)

type progressKey struct{}

// WithProgress returns ctx carrying p, for the call run with it: a tool
// that can report progress reports it to p.
func WithProgress(ctx context.Context, p Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, p)
}

// ProgressFrom returns the Progress ctx carries, or nil.
func ProgressFrom(ctx context.Context) Progress {
	p, _ := ctx.Value(progressKey{}).(Progress)
	return p
}
