package tools

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFileToolsRefuseHardLinks: a hard link in the workspace to a file
// outside it is the outside file under a second name, which the os.Root
// cannot see through.
//
// Reproduction (before): ln /outside/secret.txt ws/link; read_file
// {"path":"link"} returned "secret", and write_file {"path":"link",
// "content":"pwned"} overwrote /outside/secret.txt. Now both fail, and the
// file outside is left as it was — not even truncated by an overwrite's open.
func TestFileToolsRefuseHardLinks(t *testing.T) {
	t.Parallel()
	read := builtin(t, BuiltinConfig{}, "read_file")
	write := builtin(t, BuiltinConfig{}, "write_file")
	for _, tt := range []struct {
		name string
		tool Tool
		args string
		want string
	}{
		{"read", read, `{"path":"link"}`, `read_file: "link" has other hard links`},
		{"overwrite", write, `{"path":"link","content":"pwned"}`, `write_file: "link" has other hard links`},
		{"append", write, `{"path":"link","content":"pwned","mode":"append"}`, `write_file: "link" has other hard links`},
		{"create", write, `{"path":"link","content":"pwned","mode":"create"}`, `write_file: "link" already exists`},
		{"absolute path", write, `{"path":"LINK","content":"pwned"}`, `has other hard links`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ws, outside := t.TempDir(), t.TempDir()
			secret := filepath.Join(outside, "secret.txt")
			writeFile(t, secret, "secret")
			if err := os.Link(secret, filepath.Join(ws, "link")); err != nil {
				t.Fatalf("make the hard link: %v", err)
			}
			args := tt.args
			if tt.name == "absolute path" {
				args = `{"path":"` + filepath.Join(ws, "link") + `","content":"pwned"}`
			}
			mustFail(t, tt.tool, ws, args, tt.want)
			if got := readFile(t, secret); got != "secret" {
				t.Fatalf("the file outside the workspace is now %q", got)
			}
		})
	}

	// A file with one link is read and overwritten as before, and an
	// overwrite still truncates.
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "one.txt"), "a long first version")
	mustOK(t, write, ws, `{"path":"one.txt","content":"short"}`, nil)
	if got := readFile(t, filepath.Join(ws, "one.txt")); got != "short" {
		t.Fatalf("overwrite left %q", got)
	}
	var out struct{ Content string }
	mustOK(t, read, ws, `{"path":"one.txt"}`, &out)
	if out.Content != "short" {
		t.Fatalf("read %q", out.Content)
	}
}
