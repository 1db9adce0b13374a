package tools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"
)

// readFileTool reads {"path": p}, a regular file in the workspace, and returns
// {"path", "content", "size", "truncated"} with at most maxBytes of content.
// size is the file's size; content that is not UTF-8 text is base64 and the
// output then says "encoding": "base64". A file with more than one hard link
// is refused: its other name may be outside the workspace.
type readFileTool struct{ maxBytes int }

func (readFileTool) Name() string    { return "read_file" }
func (readFileTool) Risk() RiskLevel { return RiskLow }
func (readFileTool) Edits() bool     { return false }
func (readFileTool) Description() string {
	return "Reads a file in the workspace and returns its content (base64 when it is not UTF-8 text), its size and whether it was truncated."
}
func (readFileTool) InputSchema() json.RawMessage { return json.RawMessage(readFileSchema) }

type readFileArgs struct {
	Path string `json:"path" args:"required"`
}

type readFileOutput struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding,omitempty"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated"`
}

func (t readFileTool) Run(ctx context.Context, call Call) (Result, error) {
	const tool = "read_file"
	var a readFileArgs
	if err := DecodeArgs(tool, call.Args, &a); err != nil {
		return Failf("%v", err), nil
	}
	if a.Path == "" {
		return Failf("%s: args.path must not be empty", tool), nil
	}
	if err := ctxErr(ctx, tool); err != nil {
		return Result{}, err
	}
	root, err := openWorkspace(tool, call.Workspace)
	if err != nil {
		return Result{}, err
	}
	defer root.Close()
	name, ok := localName(call.Workspace, a.Path)
	if !ok {
		return Failf("%s: path %q is outside the workspace", tool, a.Path), nil
	}
	// O_NONBLOCK so that a FIFO cannot hang the call in open; it is then
	// refused as not a regular file.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fsFailure(tool, a.Path, err), nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsFailure(tool, a.Path, err), nil
	}
	if fi.IsDir() {
		return Failf("%s: %q is a directory", tool, a.Path), nil
	}
	if !fi.Mode().IsRegular() {
		return Failf("%s: %q is not a regular file", tool, a.Path), nil
	}
	if linkedElsewhere(fi) {
		return Failf("%s: %q has other hard links, which may be outside the workspace; it is not read", tool, a.Path), nil
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(t.maxBytes)+1))
	if err != nil {
		return fsFailure(tool, a.Path, err), nil
	}
	if err := ctxErr(ctx, tool); err != nil {
		return Result{}, err
	}
	out := readFileOutput{Path: filepath.ToSlash(name), Size: fi.Size()}
	if len(data) > t.maxBytes || fi.Size() > int64(t.maxBytes) {
		out.Truncated = true
		data = data[:min(len(data), t.maxBytes)]
		if text := cutRune(data); utf8.Valid(text) {
			data = text
		}
	}
	if utf8.Valid(data) {
		out.Content = string(data)
	} else {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return Succeed(out)
}
