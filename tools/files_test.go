package tools

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

type readOut struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated"`
}

// fixture makes a workspace and, next to it, a directory outside it with a
// secret file; it returns both.
func fixture(t *testing.T) (ws, outside string) {
	t.Helper()
	ws, outside = t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(outside, "secret.txt"), "secret")
	writeFile(t, filepath.Join(ws, "a.txt"), "hello")
	writeFile(t, filepath.Join(ws, "sub", "b.txt"), "bee")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(ws, "abs-escape")))
	rel, err := filepath.Rel(ws, filepath.Join(outside, "secret.txt"))
	must(err)
	must(os.Symlink(rel, filepath.Join(ws, "rel-escape")))
	must(os.Symlink(outside, filepath.Join(ws, "dir-escape")))
	must(os.Symlink("sub/b.txt", filepath.Join(ws, "inside-link")))
	must(syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644))
	return ws, outside
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	ws, _ := fixture(t)
	read := builtin(t, BuiltinConfig{}, "read_file")
	for _, tt := range []struct{ path, wantPath, content string }{
		{"a.txt", "a.txt", "hello"},
		{"./sub/../a.txt", "a.txt", "hello"},
		{"sub/b.txt", "sub/b.txt", "bee"},
		{filepath.Join(ws, "sub", "b.txt"), "sub/b.txt", "bee"},
		{"inside-link", "inside-link", "bee"},
	} {
		var out readOut
		args, _ := json.Marshal(map[string]string{"path": tt.path})
		mustOK(t, read, ws, string(args), &out)
		if out.Path != tt.wantPath || out.Content != tt.content || out.Size != int64(len(tt.content)) || out.Truncated || out.Encoding != "" {
			t.Errorf("read %s: %+v", tt.path, out)
		}
	}
}

func TestReadFileRefuses(t *testing.T) {
	t.Parallel()
	ws, outside := fixture(t)
	read := builtin(t, BuiltinConfig{}, "read_file")
	for _, tt := range []struct{ name, args, want string }{
		{"no path", `{}`, "read_file: args.path is required"},
		{"empty path", `{"path":""}`, "read_file: args.path must not be empty"},
		{"path not a string", `{"path":["a"]}`, "read_file: args.path must be a string, not an array"},
		{"unknown argument", `{"path":"a.txt","offset":3}`, `read_file: unknown argument "offset" (want path)`},
		{"dot-dot", `{"path":"../secret.txt"}`, `read_file: path "../secret.txt" is outside the workspace`},
		{"dot-dot inside", `{"path":"sub/../../x"}`, "is outside the workspace"},
		{"absolute outside", `{"path":"/etc/passwd"}`, `read_file: path "/etc/passwd" is outside the workspace`},
		{"absolute sibling", `{"path":"` + filepath.Join(outside, "secret.txt") + `"}`, "is outside the workspace"},
		{"absolute symlink out", `{"path":"abs-escape"}`, `read_file: "abs-escape":`},
		{"relative symlink out", `{"path":"rel-escape"}`, `read_file: "rel-escape": path escapes from parent`},
		{"through a symlinked dir", `{"path":"dir-escape/secret.txt"}`, `read_file: "dir-escape/secret.txt": path escapes from parent`},
		{"missing", `{"path":"nope.txt"}`, `read_file: "nope.txt" does not exist`},
		{"directory", `{"path":"sub"}`, `read_file: "sub" is a directory`},
		{"workspace itself", `{"path":"."}`, `read_file: "." is a directory`},
		{"fifo", `{"path":"fifo"}`, `read_file: "fifo" is not a regular file`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := mustFail(t, read, ws, tt.args, tt.want)
			if strings.Contains(string(res.Output)+res.Error, "secret\"") {
				t.Fatalf("the secret leaked: %+v", res)
			}
		})
	}
}

func TestReadFileCap(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "big.txt"), strings.Repeat("x", 3000))
	writeFile(t, filepath.Join(ws, "accents.txt"), strings.Repeat("é", 10)) // 20 bytes
	writeFile(t, filepath.Join(ws, "exact.txt"), strings.Repeat("y", 16))
	binary := []byte{0xff, 0xfe, 0, 1, 2}
	if err := os.WriteFile(filepath.Join(ws, "bin"), binary, 0o644); err != nil {
		t.Fatal(err)
	}
	read := builtin(t, BuiltinConfig{MaxReadBytes: 16}, "read_file")

	var out readOut
	mustOK(t, read, ws, `{"path":"big.txt"}`, &out)
	if out.Content != strings.Repeat("x", 16) || out.Size != 3000 || !out.Truncated {
		t.Fatalf("big: %+v", out)
	}
	out = readOut{}
	mustOK(t, read, ws, `{"path":"exact.txt"}`, &out)
	if len(out.Content) != 16 || out.Truncated {
		t.Fatalf("exactly at the cap: %+v", out)
	}
	// A cut through a character drops the broken character; 21 would do too.
	read15 := builtin(t, BuiltinConfig{MaxReadBytes: 15}, "read_file")
	out = readOut{}
	mustOK(t, read15, ws, `{"path":"accents.txt"}`, &out)
	if out.Content != strings.Repeat("é", 7) || out.Size != 20 || !out.Truncated || out.Encoding != "" {
		t.Fatalf("accents: %+v", out)
	}
	out = readOut{}
	mustOK(t, read, ws, `{"path":"bin"}`, &out)
	if out.Encoding != "base64" || out.Content != base64.StdEncoding.EncodeToString(binary) || out.Truncated {
		t.Fatalf("binary: %+v", out)
	}
}

func TestFileToolsNeedAWorkspace(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	writeFile(t, file, "x")
	for _, name := range []string{"read_file", "write_file", "shell"} {
		tool := builtin(t, BuiltinConfig{}, name)
		args := map[string]string{
			"read_file":  `{"path":"a"}`,
			"write_file": `{"path":"a","content":"x"}`,
			"shell":      `{"command":"true"}`,
		}[name]
		for _, ws := range []string{"", filepath.Join(t.TempDir(), "missing"), file} {
			_, err := run(t, t.Context(), tool, ws, args)
			if !errors.Is(err, ErrNoWorkspace) {
				t.Errorf("%s in %q: got %v, want ErrNoWorkspace", name, ws, err)
			}
		}
	}
}

type writeOut struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
	Mode  string `json:"mode"`
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	write := builtin(t, BuiltinConfig{}, "write_file")

	var out writeOut
	mustOK(t, write, ws, `{"path":"deep/er/new.txt","content":"héllo"}`, &out)
	if out != (writeOut{"deep/er/new.txt", 6, "overwrite"}) {
		t.Fatalf("new: %+v", out)
	}
	if got := readFile(t, filepath.Join(ws, "deep/er/new.txt")); got != "héllo" {
		t.Fatalf("file holds %q", got)
	}
	info, err := os.Stat(filepath.Join(ws, "deep/er/new.txt"))
	if err != nil || info.Mode().Perm() != 0o644&^umask() {
		t.Fatalf("mode %v, %v", info.Mode(), err)
	}

	mustOK(t, write, ws, `{"path":"deep/er/new.txt","content":"bye","mode":"overwrite"}`, nil)
	mustOK(t, write, ws, `{"path":"deep/er/new.txt","content":"!","mode":"append"}`, &out)
	if got := readFile(t, filepath.Join(ws, "deep/er/new.txt")); got != "bye!" || out.Mode != "append" || out.Bytes != 1 {
		t.Fatalf("after overwrite and append: %q, %+v", got, out)
	}
	mustFail(t, write, ws, `{"path":"deep/er/new.txt","content":"x","mode":"create"}`, `write_file: "deep/er/new.txt" already exists`)
	mustOK(t, write, ws, `{"path":"fresh.txt","content":"","mode":"create"}`, nil)
	if got := readFile(t, filepath.Join(ws, "fresh.txt")); got != "" {
		t.Fatalf("fresh: %q", got)
	}
	mustOK(t, write, ws, `{"path":"bin","content":"//4AAQ==","encoding":"base64"}`, &out)
	if got := readFile(t, filepath.Join(ws, "bin")); got != "\xff\xfe\x00\x01" || out.Bytes != 4 {
		t.Fatalf("base64: %q, %+v", got, out)
	}
	mustOK(t, write, ws, `{"path":"`+filepath.Join(ws, "abs.txt")+`","content":"a"}`, &out)
	if out.Path != "abs.txt" || readFile(t, filepath.Join(ws, "abs.txt")) != "a" {
		t.Fatalf("absolute inside: %+v", out)
	}
	// A symbolic link inside the workspace is followed.
	if err := os.Symlink("fresh.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	mustOK(t, write, ws, `{"path":"link","content":"via link"}`, nil)
	if got := readFile(t, filepath.Join(ws, "fresh.txt")); got != "via link" {
		t.Fatalf("through the link: %q", got)
	}
}

func umask() os.FileMode {
	m := syscall.Umask(0)
	syscall.Umask(m)
	return os.FileMode(m)
}

func TestWriteFileRefuses(t *testing.T) {
	t.Parallel()
	ws, outside := fixture(t)
	write := builtin(t, BuiltinConfig{}, "write_file")
	for _, tt := range []struct{ name, args, want string }{
		{"no path", `{"content":"x"}`, "write_file: args.path is required"},
		{"no content", `{"path":"x"}`, "write_file: args.content is required"},
		{"empty path", `{"path":"","content":"x"}`, "write_file: args.path must not be empty"},
		{"content not a string", `{"path":"x","content":{"a":1}}`, "write_file: args.content must be a string, not an object"},
		{"unknown argument", `{"path":"x","content":"x","force":true}`, `write_file: unknown argument "force" (want content, encoding, mode, path)`},
		{"bad mode", `{"path":"x","content":"x","mode":"truncate"}`, `write_file: args.mode "truncate" is not overwrite, append or create`},
		{"bad encoding", `{"path":"x","content":"x","encoding":"hex"}`, `write_file: args.encoding "hex" is not utf-8 or base64`},
		{"bad base64", `{"path":"x","content":"!!","encoding":"base64"}`, "write_file: args.content is not valid base64"},
		{"dot-dot", `{"path":"../evil.txt","content":"x"}`, `write_file: path "../evil.txt" is outside the workspace`},
		{"absolute outside", `{"path":"` + filepath.Join(outside, "evil.txt") + `","content":"x"}`, "is outside the workspace"},
		{"absolute symlink out", `{"path":"abs-escape","content":"pwned"}`, `write_file: "abs-escape":`},
		{"relative symlink out", `{"path":"rel-escape","content":"pwned"}`, "path escapes from parent"},
		{"through a symlinked dir", `{"path":"dir-escape/evil.txt","content":"x"}`, `write_file: "dir-escape/evil.txt": path escapes from parent`},
		{"new dir through a symlinked dir", `{"path":"dir-escape/d/evil.txt","content":"x"}`, "path escapes from parent"},
		{"workspace itself", `{"path":".","content":"x"}`, `write_file: path "." is the workspace itself`},
		{"a directory", `{"path":"sub","content":"x"}`, `write_file: "sub": is a directory`},
		{"under a file", `{"path":"a.txt/x","content":"x"}`, `write_file: "a.txt/x": a parent of it is not a directory`},
		{"deeper under a file", `{"path":"a.txt/y/x","content":"x"}`, `write_file: "a.txt/y/x": a parent of it is not a directory`},
		{"fifo", `{"path":"fifo","content":"x"}`, `write_file: "fifo" is not a regular file`},
	} {
		t.Run(tt.name, func(t *testing.T) { mustFail(t, write, ws, tt.args, tt.want) })
	}
	if got := readFile(t, filepath.Join(outside, "secret.txt")); got != "secret" {
		t.Fatalf("the file outside was changed to %q", got)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 1 {
		t.Fatalf("files were created outside the workspace: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(ws), "evil.txt")); err == nil {
		t.Fatal("../evil.txt was created")
	}
}
