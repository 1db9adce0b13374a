package taskview

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/tasklist"
)

// TestReadVerbs: inspect writes a task's state as text or JSON and checks
// its tail; the task listing names each task with its row; an unknown
// task is said to be unknown; a whole log passes the tail check.
func TestReadVerbs(t *testing.T) {
	ctx := t.Context()
	h, id := runTask(t, ctx)
	unknown := noeta.NewTaskID()
	tests := []struct {
		name    string
		read    func(*strings.Builder) error
		want    []string
		errText string
	}{
		{"inspect", func(b *strings.Builder) error { return Inspect(ctx, h, id, false, b, func(string) {}) },
			[]string{"task      " + id, "status    terminal", "dispatch  terminal"}, ""},
		{"inspect --json", func(b *strings.Builder) error { return Inspect(ctx, h, id, true, b, func(string) {}) },
			[]string{`"task_id":"` + id + `"`, `"dispatcher":{`, `"turns":[`}, ""},
		{"inspect an unknown task", func(b *strings.Builder) error { return Inspect(ctx, h, unknown, false, b, func(string) {}) },
			nil, "no task " + unknown + " in this deployment"},
		{"tasks", func(b *strings.Builder) error { return WriteTasks(ctx, h, tasklist.Filter{}, false, b, io.Discard) },
			[]string{"TASK                        AGENT  STATUS     LAST RECORD", id + "  "}, ""},
		{"tasks --json", func(b *strings.Builder) error { return WriteTasks(ctx, h, tasklist.Filter{}, true, b, io.Discard) },
			[]string{`{"task":"` + id + `"`}, ""},
		{"tasks of no status", func(b *strings.Builder) error {
			return WriteTasks(ctx, h, tasklist.Filter{Status: []string{tasklist.Waiting}}, false, b, io.Discard)
		}, []string{"TASK "}, ""},
		{"the tail of a whole log", func(*strings.Builder) error { return CheckTail(ctx, h, id) }, nil, ""},
		{"the tail of an unknown task", func(*strings.Builder) error { return CheckTail(ctx, h, unknown) }, nil, "not found"},
	}
	for _, tt := range tests {
		var b strings.Builder
		err := tt.read(&b)
		if tt.errText != "" {
			if err == nil || !strings.Contains(err.Error(), tt.errText) {
				t.Errorf("%s: err = %v, want %q", tt.name, err, tt.errText)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !strings.HasSuffix(tt.name, "--json") {
			// JSON keeps the record's runes, escaped by the command's
			// writer (internal/termsafe) as JSON escapes.
			assertSafe(t, tt.name, b.String())
		}
		for _, want := range tt.want {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s lacks %q:\n%s", tt.name, want, b.String())
			}
		}
		if strings.HasSuffix(tt.name, "--json") && !json.Valid([]byte(b.String())) {
			t.Errorf("%s is not JSON:\n%s", tt.name, b.String())
		}
	}
}
