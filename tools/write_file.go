package tools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// writeFileTool writes {"path", "content", "mode"?, "encoding"?} to a file in
// the workspace, creating missing parent directories, and returns {"path",
// "bytes", "mode"}. mode is overwrite (the default), append, or create (which
// fails if the file exists); encoding is utf-8 (the default) or base64. It is
// the built-in edit tool. An existing file with more than one hard link is
// refused, and left untouched: its other name may be outside the workspace.
type writeFileTool struct{}

func (writeFileTool) Name() string    { return "write_file" }
func (writeFileTool) Risk() RiskLevel { return RiskHigh }
func (writeFileTool) Edits() bool     { return true }
func (writeFileTool) Description() string {
	return "Writes a file in the workspace (overwrite, append or create) and returns its path, the bytes written and the mode."
}
func (writeFileTool) InputSchema() json.RawMessage { return json.RawMessage(writeFileSchema) }

type writeFileArgs struct {
	Path     string `json:"path" args:"required"`
	Content  string `json:"content" args:"required"`
	Mode     string `json:"mode"`
	Encoding string `json:"encoding"`
}

type writeFileOutput struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
	Mode  string `json:"mode"`
}

func (writeFileTool) Run(ctx context.Context, call Call) (Result, error) {
	const tool = "write_file"
	var a writeFileArgs
	if err := DecodeArgs(tool, call.Args, &a); err != nil {
		return Failf("%v", err), nil
	}
	if a.Path == "" {
		return Failf("%s: args.path must not be empty", tool), nil
	}
	// No O_TRUNC: an overwrite truncates only once the opened file has been
	// checked (a hard link to a file outside the workspace must be left as
	// it is).
	flags := os.O_WRONLY | os.O_CREATE | syscall.O_NONBLOCK
	switch a.Mode {
	case "", "overwrite":
		a.Mode = "overwrite"
	case "append":
		flags |= os.O_APPEND
	case "create":
		flags |= os.O_EXCL
	default:
		return Failf("%s: args.mode %q is not overwrite, append or create", tool, a.Mode), nil
	}
	data := []byte(a.Content)
	switch a.Encoding {
	case "", "utf-8":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
			return Failf("%s: args.content is not valid base64: %v", tool, err), nil
		}
	default:
		return Failf("%s: args.encoding %q is not utf-8 or base64", tool, a.Encoding), nil
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
	if name == "." {
		return Failf("%s: path %q is the workspace itself", tool, a.Path), nil
	}
	if dir := filepath.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTDIR) {
				return Failf("%s: %q: a parent of it is not a directory", tool, a.Path), nil
			}
			return fsFailure(tool, a.Path, err), nil
		}
	}
	f, err := root.OpenFile(name, flags, 0o644)
	if err != nil {
		return fsFailure(tool, a.Path, err), nil
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fsFailure(tool, a.Path, err), nil
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return Failf("%s: %q is not a regular file", tool, a.Path), nil
	}
	if linkedElsewhere(fi) {
		f.Close()
		return Failf("%s: %q has other hard links, which may be outside the workspace; it is not written", tool, a.Path), nil
	}
	if a.Mode == "overwrite" {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return fsFailure(tool, a.Path, err), nil
		}
	}
	n, err := f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fsFailure(tool, a.Path, err), nil
	}
	return Succeed(writeFileOutput{Path: filepath.ToSlash(name), Bytes: n, Mode: a.Mode})
}
