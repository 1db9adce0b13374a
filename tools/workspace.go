package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"unicode/utf8"
)

// openWorkspace opens the call's workspace as the root every file access goes
// through. A missing workspace is the engine's fault, so it is an error.
func openWorkspace(tool, ws string) (*os.Root, error) {
	if ws == "" {
		return nil, fmt.Errorf("%w: %s: the call has no workspace", ErrNoWorkspace, tool)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoWorkspace, tool, err)
	}
	return root, nil
}

// localName turns p, relative to the workspace or absolute and inside it, into
// the clean relative name an os.Root takes. It reports false for a path that
// lies outside the workspace as written ("..", an absolute path elsewhere);
// the os.Root catches symbolic links that lead outside.
func localName(ws, p string) (string, bool) {
	if filepath.IsAbs(p) {
		absWS, err := filepath.Abs(ws)
		if err != nil {
			return "", false
		}
		rel, err := filepath.Rel(absWS, p)
		if err != nil {
			return "", false
		}
		p = rel
	}
	if !filepath.IsLocal(p) {
		return "", false
	}
	return filepath.Clean(p), true
}

// linkedElsewhere reports whether the opened file fi has more than one hard
// link. The os.Root keeps a call's path inside the workspace, but a hard link
// is the same file under a second name, and nothing tells whether the other
// name is inside the workspace too: a link to /etc/passwd made in the
// workspace would let a call read or overwrite it. The file tools refuse such
// a file (docs/adr/0018). It is checked on the opened descriptor, so the file
// checked is the file read or written.
func linkedElsewhere(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink > 1
}

// fsFailure words a file-system error of a call for the model.
func fsFailure(tool, name string, err error) Result {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Failf("%s: %q does not exist", tool, name)
	case errors.Is(err, fs.ErrExist):
		return Failf("%s: %q already exists", tool, name)
	case errors.Is(err, fs.ErrPermission):
		return Failf("%s: %q: permission denied", tool, name)
	case errors.Is(err, syscall.ENXIO):
		// A FIFO with no reader, opened without blocking.
		return Failf("%s: %q is not a regular file", tool, name)
	}
	// Keep the innermost cause: an os.Root says "path escapes from parent"
	// for a symbolic link that leads out of the workspace.
	var pe *fs.PathError
	for errors.As(err, &pe) {
		err = pe.Err
	}
	return Failf("%s: %q: %v", tool, name, err)
}

// cutRune drops an incomplete UTF-8 sequence at the end of b, left there by a
// cut at a byte count, so the kept text does not end in a broken character.
func cutRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}
