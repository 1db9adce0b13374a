package observers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// ---- hooks harness ----

// writeHookScript writes a /bin/sh script into dir and returns the command
// that runs it, relative to dir (the hooks' workspace).
func writeHookScript(t *testing.T, dir, name, body string) []string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"/bin/sh", name}
}

func newTestHooks(t *testing.T, cfg HooksObserverConfig) (*Hooks, *logSink) {
	t.Helper()
	logs := &logSink{t: t}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := NewHooks(cfg)
	if err != nil {
		t.Fatalf("NewHooks: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.Close(ctx)
	})
	return h, logs
}

// hookRecord is a committed-looking record of task at seq.
func hookRecord(t *testing.T, task string, seq uint64, p noeta.Payload) eventlog.Envelope {
	t.Helper()
	env := mustEnvelope(t, task, eventlog.OriginTool, p)
	env.ID = fmt.Sprintf("01TEST%020d", seq)
	env.Seq = seq
	env.Time = time.Now()
	env.CorrelationID = task
	env.LeaseGen = 1
	return env
}

func finished(callID, tool string) noeta.ToolCallFinished {
	return noeta.ToolCallFinished{CallID: callID, Tool: tool, OK: true, Output: json.RawMessage(`"ok"`), DurationMS: 1}
}

func closeHooks(t *testing.T, h *Hooks) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := h.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func readKV(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		out[k] = v
	}
	return out
}

func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hookGroupMembers lists the live (not zombie) processes of process group
// pgid, from /proc.
func hookGroupMembers(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// wantHookGroupGone reads a pgid a hook wrote and waits a little for its
// group to have no live member.
func wantHookGroupGone(t *testing.T, pgidFile string) {
	t.Helper()
	b, err := os.ReadFile(pgidFile)
	if err != nil {
		t.Fatal(err)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pgid <= 1 {
		t.Fatalf("pgid %q: %v", b, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := hookGroupMembers(t, pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still has live members %v", pgid, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const envScript = `{
  echo "task=$NOETA_TASK_ID"
  echo "type=$NOETA_EVENT_TYPE"
  echo "id=$NOETA_EVENT_ID"
  echo "seq=$NOETA_SEQ"
  echo "tool=$NOETA_TOOL"
  echo "call=$NOETA_CALL_ID"
  echo "handle=$NOETA_HANDLE"
  echo "pwd=$(pwd)"
  echo "secret=${NOETA_HOOKS_TEST_SECRET-unset}"
  echo "extra=$EXTRA"
} > "$1.env"
cat > "$1.json"
`

// ---- cases ----

// A PostToolUse hook runs after a ToolCallFinished of a matching tool, fed
// in-process from a real store, with the record on stdin and its identity
// in the environment, in the workspace, with the process's environment
// scrubbed.
func TestHooksPostToolUse(t *testing.T) {
	t.Setenv("NOETA_HOOKS_TEST_SECRET", "engine credentials")
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "env.sh", envScript)
	h, _ := newTestHooks(t, HooksObserverConfig{
		PostToolUse: []ToolHook{{MatchTool: "ec*", Command: append(cmd, "post")}},
		Workspace:   ws,
		Env:         []string{"EXTRA=given"},
	})
	hx := newHarness(t)
	sub := hx.s.Subscribe(h.Observe)
	defer sub.Cancel()
	id, l := hx.rootTask()
	hx.emit(l, noeta.ToolCallStarted{CallID: "c1", Tool: "echo", Args: json.RawMessage(`{}`), Turn: 1})
	env := hx.emit(l, finished("c1", "echo"))
	hx.emit(l, finished("c2", "shell"))
	closeHooks(t, h)
	if st := sub.Stats(); st.Failed != 0 || st.Panicked != 0 {
		t.Errorf("subscription stats %+v", st)
	}

	got := readKV(t, filepath.Join(ws, "post.env"))
	want := map[string]string{
		"task": id, "type": noeta.TypeToolCallFinished, "id": env.ID, "seq": strconv.FormatUint(env.Seq, 10),
		"tool": "echo", "call": "c1", "handle": "", "pwd": ws, "secret": "unset", "extra": "given",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s=%q, want %q", k, got[k], w)
		}
	}
	b, err := os.ReadFile(filepath.Join(ws, "post.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec RecordJSON
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("stdin %q: %v", b, err)
	}
	if rec.ID != env.ID || rec.Task != id || rec.Seq != env.Seq || rec.Type != env.Type || rec.Origin != env.Origin ||
		rec.Actor != env.Actor || rec.LeaseGen != env.LeaseGen || rec.CorrelationID != env.CorrelationID ||
		string(rec.Payload) != string(env.Payload) || !rec.Time.Equal(env.Time) {
		t.Errorf("stdin %s\nwant the record %+v", b, env)
	}
	if st := h.Stats(); st != (HooksStats{Queued: 1, Ran: 1}) {
		t.Errorf("stats %+v, want one run (the shell call matches no hook)", st)
	}
}

// Every hook whose pattern matches runs, in config order, and only those. The
// patterns are read by internal/glob, as rules' match_tool is, character
// classes included.
//
// Reproduction (before): the hooks observer had a matcher of its own that
// knew only '*' and '?', and refused "[rw]*", which rules' match_tool (and
// CheckTools, for the same hook) read as a class.
func TestHooksGlobMatching(t *testing.T) {
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "log.sh", `echo "$1 $NOETA_TOOL" >> runs.log`+"\n")
	h, _ := newTestHooks(t, HooksObserverConfig{
		PostToolUse: []ToolHook{
			{MatchTool: "*", Command: append(cmd, "all")},
			{MatchTool: "read_*", Command: append(cmd, "reads")},
			{MatchTool: "?cho", Command: append(cmd, "echoes")},
			{MatchTool: "shell", Command: append(cmd, "shell")},
			{MatchTool: "[rw]*_file", Command: append(cmd, "class")},
		},
		Workspace: ws,
	})
	for i, tool := range []string{"read_file", "echo", "shell", "write_file", "mcp/read_x"} {
		if err := h.Observe(t.Context(), hookRecord(t, "t1", uint64(i+3), finished(fmt.Sprintf("c%d", i), tool))); err != nil {
			t.Fatal(err)
		}
	}
	closeHooks(t, h)
	b, err := os.ReadFile(filepath.Join(ws, "runs.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"all read_file", "reads read_file", "class read_file",
		"all echo", "echoes echo",
		"all shell", "shell shell",
		"all write_file", "class write_file",
		"all mcp/read_x",
	}
	if got := strings.Split(strings.TrimSpace(string(b)), "\n"); !slices.Equal(got, want) {
		t.Errorf("runs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st := h.Stats(); st.Queued != 10 || st.Ran != 10 {
		t.Errorf("stats %+v", st)
	}
}

// A Notification hook runs on ApprovalRequested, and on nothing else.
func TestHooksNotificationOnApproval(t *testing.T) {
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "env.sh", envScript)
	h, _ := newTestHooks(t, HooksObserverConfig{
		Notification: []NotificationHook{{On: []string{NotifyOnApproval}, Command: append(cmd, "page"), Timeout: 5 * time.Second}},
		Workspace:    ws,
	})
	hx := newHarness(t)
	sub := hx.s.Subscribe(h.Observe)
	defer sub.Cancel()
	id, l := hx.rootTask()
	hx.emit(l, finished("c0", "echo"))
	env := hx.emit(l, noeta.ApprovalRequested{
		Handle: "approval-c1", Action: noeta.ApprovalToolCall, CallID: "c1", Tool: "shell", Args: json.RawMessage(`{"command":"ls"}`),
		Guard: "permission", Reason: "shell needs approval",
	})
	hx.emit(l, noeta.TaskSuspended{Reason: "approval", WakeOn: noeta.Wake{Kind: noeta.WakeHumanResponse, Handle: "approval-c1"}})
	closeHooks(t, h)

	got := readKV(t, filepath.Join(ws, "page.env"))
	for k, w := range map[string]string{
		"task": id, "type": noeta.TypeApprovalRequested, "seq": strconv.FormatUint(env.Seq, 10),
		"handle": "approval-c1", "tool": "shell", "call": "c1",
	} {
		if got[k] != w {
			t.Errorf("%s=%q, want %q", k, got[k], w)
		}
	}
	if st := h.Stats(); st != (HooksStats{Queued: 1, Ran: 1}) {
		t.Errorf("stats %+v, want one run: TaskSuspended and ToolCallFinished call for no notification", st)
	}
}

// A hook that runs past its timeout is killed with its children, and
// counted.
func TestHooksTimeoutKillsTheProcessGroup(t *testing.T) {
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "hang.sh", "echo $$ > pgid\nsleep 30 &\nsleep 30\nwait\n")
	h, logs := newTestHooks(t, HooksObserverConfig{
		PostToolUse: []ToolHook{{MatchTool: "*", Command: cmd, Timeout: 300 * time.Millisecond}},
		Workspace:   ws,
	})
	start := time.Now()
	if err := h.Observe(t.Context(), hookRecord(t, "t1", 3, finished("c1", "echo"))); err != nil {
		t.Fatal(err)
	}
	closeHooks(t, h)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("a 300ms timeout ended the hook after %v", d)
	}
	if st := h.Stats(); st != (HooksStats{Queued: 1, TimedOut: 1}) {
		t.Errorf("stats %+v, want one timed out", st)
	}
	wantHookGroupGone(t, filepath.Join(ws, "pgid"))
	if !logs.contains("hooks: the hook timed out") {
		t.Error("the timeout was not logged")
	}
}

// A hook that exits on its own leaves no process behind either, and its
// output is kept up to the cap for the log.
func TestHooksFailureAndOutput(t *testing.T) {
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "fail.sh", "echo $$ > pgid\nsleep 30 &\nhead -c 10000 /dev/zero | tr '\\0' x\necho oops >&2\nexit 3\n")
	h, logs := newTestHooks(t, HooksObserverConfig{
		PostToolUse: []ToolHook{{MatchTool: "*", Command: cmd}, {MatchTool: "*", Command: []string{"./missing-program"}}},
		Workspace:   ws,
	})
	if err := h.Observe(t.Context(), hookRecord(t, "t1", 3, finished("c1", "echo"))); err != nil {
		t.Fatal(err)
	}
	closeHooks(t, h)
	if st := h.Stats(); st != (HooksStats{Queued: 2, Failed: 2}) {
		t.Errorf("stats %+v, want both failed", st)
	}
	wantHookGroupGone(t, filepath.Join(ws, "pgid"))
	for _, want := range []string{"hooks: the hook failed", "exit status 3", strings.Repeat("x", 100), "… (10005 bytes in all)", "hooks: the hook could not start"} {
		if !logs.contains(want) {
			t.Errorf("the log does not contain %q", want)
		}
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if n := strings.Count(logs.buf.String(), "x"); n > HookOutputMax+200 {
		t.Errorf("the log holds %d x's; the output cap is %d", n, HookOutputMax)
	}
}

// With the queue full, a run is dropped and counted, and Observe returns at
// once: it never waits for a worker.
func TestHooksFullQueueDrops(t *testing.T) {
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "block.sh", "touch started-$NOETA_SEQ\nwhile [ ! -f release ]; do sleep 0.02; done\n")
	h, logs := newTestHooks(t, HooksObserverConfig{
		PostToolUse: []ToolHook{{MatchTool: "*", Command: cmd, Timeout: 30 * time.Second}},
		QueueSize:   1,
		Workspace:   ws,
	})
	if err := h.Observe(t.Context(), hookRecord(t, "t1", 1, finished("c1", "echo"))); err != nil {
		t.Fatal(err)
	}
	waitForFile(t, filepath.Join(ws, "started-1"))
	// The worker is busy and the queue empty: one more fits, nine do not.
	done := make(chan error, 1)
	go func() {
		for i := range 10 {
			if err := h.Observe(t.Context(), hookRecord(t, "t1", uint64(i+2), finished("c", "echo"))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Observe waited for the busy worker")
	}
	if st := h.Stats(); st != (HooksStats{Queued: 2, Dropped: 9, Pending: 1, Running: 1}) {
		t.Errorf("stats %+v, want 2 queued (1 running, 1 waiting) and 9 dropped", st)
	}
	if !logs.contains("hooks: the queue is full") {
		t.Error("the drops were not logged")
	}
	if err := os.WriteFile(filepath.Join(ws, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	closeHooks(t, h)
	if st := h.Stats(); st != (HooksStats{Queued: 2, Ran: 2, Dropped: 9}) {
		t.Errorf("stats %+v, want both queued runs done", st)
	}
	if _, err := os.Stat(filepath.Join(ws, "started-2")); err != nil {
		t.Errorf("the queued run did not run: %v", err)
	}
}

// Close waits for the runs in hand; after it, Observe drops.
func TestHooksCloseWaits(t *testing.T) {
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "slow.sh", "sleep 0.3\ntouch done-$NOETA_SEQ\n")
	h, _ := newTestHooks(t, HooksObserverConfig{
		PostToolUse: []ToolHook{{MatchTool: "*", Command: cmd}},
		Workspace:   ws,
	})
	for seq := uint64(1); seq <= 2; seq++ {
		if err := h.Observe(t.Context(), hookRecord(t, "t1", seq, finished("c", "echo"))); err != nil {
			t.Fatal(err)
		}
	}
	closeHooks(t, h)
	for _, f := range []string{"done-1", "done-2"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Errorf("Close returned before the run that writes %s ended: %v", f, err)
		}
	}
	if err := h.Observe(t.Context(), hookRecord(t, "t1", 3, finished("c", "echo"))); err != nil {
		t.Fatal(err)
	}
	closeHooks(t, h) // again: nothing to wait for
	if st := h.Stats(); st != (HooksStats{Queued: 2, Ran: 2, Dropped: 1}) {
		t.Errorf("stats %+v, want the run after Close dropped", st)
	}
	if _, err := os.Stat(filepath.Join(ws, "done-3")); err == nil {
		t.Error("a run after Close ran")
	}
}

// When Close's ctx ends first, the running hook is killed with its group
// and the queued ones are discarded.
func TestHooksCloseGivesUp(t *testing.T) {
	ws := t.TempDir()
	cmd := writeHookScript(t, ws, "hang.sh", "echo $$ > pgid-$NOETA_SEQ\nsleep 30 &\nsleep 30\n")
	h, _ := newTestHooks(t, HooksObserverConfig{
		PostToolUse: []ToolHook{{MatchTool: "*", Command: cmd, Timeout: time.Minute}},
		Workspace:   ws,
	})
	for seq := uint64(1); seq <= 3; seq++ {
		if err := h.Observe(t.Context(), hookRecord(t, "t1", seq, finished("c", "echo"))); err != nil {
			t.Fatal(err)
		}
	}
	waitForFile(t, filepath.Join(ws, "pgid-1"))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := h.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %v", d)
	}
	if st := h.Stats(); st != (HooksStats{Queued: 3, Failed: 1, Dropped: 2}) {
		t.Errorf("stats %+v, want the running hook failed (cancelled) and two discarded", st)
	}
	wantHookGroupGone(t, filepath.Join(ws, "pgid-1"))
	if _, err := os.Stat(filepath.Join(ws, "pgid-2")); err == nil {
		t.Error("a discarded run ran")
	}
}

func TestHooksIgnoresOtherRecords(t *testing.T) {
	h, _ := newTestHooks(t, HooksObserverConfig{
		PostToolUse:  []ToolHook{{MatchTool: "*", Command: []string{"/bin/true"}}},
		Notification: []NotificationHook{{On: []string{NotifyOnApproval}, Command: []string{"/bin/true"}}},
	})
	for _, p := range []noeta.Payload{
		noeta.TurnStarted{Turn: 1},
		noeta.ToolCallStarted{CallID: "c", Tool: "echo", Args: json.RawMessage(`{}`)},
		noeta.ToolCallDenied{CallID: "c", Tool: "echo", Guard: "g", Reason: "r"},
		noeta.ApprovalResolved{Handle: "h", Decision: noeta.ApprovalApprove, Approver: "me"},
		noeta.TaskCompleted{Answer: json.RawMessage(`"x"`)},
	} {
		if err := h.Observe(t.Context(), hookRecord(t, "t1", 3, p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Observe(t.Context(), eventlog.Envelope{Task: "t1", Seq: 9, Type: "FromTheFuture", Payload: json.RawMessage(`{}`)}); err != nil {
		t.Errorf("an unknown type: %v", err)
	}
	err := h.Observe(t.Context(), eventlog.Envelope{Task: "t1", Seq: 4, Type: noeta.TypeToolCallFinished, Payload: json.RawMessage(`{"tool":5}`)})
	if err == nil || !strings.Contains(err.Error(), "decode ToolCallFinished seq 4 of task t1") {
		t.Errorf("a bad payload: %v", err)
	}
	closeHooks(t, h)
	if st := h.Stats(); st != (HooksStats{}) {
		t.Errorf("stats %+v, want nothing run", st)
	}
}

func TestNewHooksConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cfg  HooksObserverConfig
		want string
	}{
		{"empty command", HooksObserverConfig{PostToolUse: []ToolHook{{MatchTool: "*"}}}, "hooks.post_tool_use[0].command: required"},
		{"empty program", HooksObserverConfig{Notification: []NotificationHook{{On: []string{"approval"}, Command: []string{""}}}}, "hooks.notification[0].command[0]: the program must not be empty"},
		{"no pattern", HooksObserverConfig{PostToolUse: []ToolHook{{Command: []string{"x"}}}}, `hooks.post_tool_use[0].match_tool: required: a glob over tool names ("*" for every tool)`},
		{"negative timeout", HooksObserverConfig{PostToolUse: []ToolHook{{MatchTool: "*", Command: []string{"x"}, Timeout: -1}}}, "hooks.post_tool_use[0].timeout_seconds: must be > 0"},
		{"over an hour", HooksObserverConfig{PostToolUse: []ToolHook{{MatchTool: "*", Command: []string{"x"}, Timeout: 2 * time.Hour}}}, "hooks.post_tool_use[0].timeout_seconds: must be at most 3600"},
		{"unknown on", HooksObserverConfig{Notification: []NotificationHook{{On: []string{"suspend"}, Command: []string{"x"}}}}, `hooks.notification[0].on[0]: must be one of approval, question, parked, failed, not "suspend"`},
		{"bad env", HooksObserverConfig{Env: []string{"NOVALUE"}}, `Env[0] "NOVALUE" is not KEY=VALUE`},
		{"workspace missing", HooksObserverConfig{Workspace: filepath.Join(file, "nope")}, "Workspace:"},
		{"workspace a file", HooksObserverConfig{Workspace: file}, "is not a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewHooks(tt.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want ErrInvalidConfig containing %q", err, tt.want)
			}
		})
	}
	h, err := NewHooks(HooksObserverConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if h.Name() != "hooks" || h.cfg.QueueSize != DefaultHooksQueueSize || h.cfg.Workers != 1 {
		t.Errorf("defaults: %+v", h.cfg)
	}
	if err := h.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A class is a pattern like any other (rules' match_tool reads it so).
	hc, err := NewHooks(HooksObserverConfig{PostToolUse: []ToolHook{{MatchTool: "[rw]*", Command: []string{"x"}}}})
	if err != nil {
		t.Fatalf("a class: %v", err)
	}
	hc.Close(t.Context())
	// The specs are the caller's: changing them afterwards changes nothing.
	spec := []ToolHook{{MatchTool: "*", Command: []string{"/bin/true"}}}
	h2, err := NewHooks(HooksObserverConfig{PostToolUse: spec})
	if err != nil {
		t.Fatal(err)
	}
	spec[0].Command[0] = "/bin/false"
	if h2.post[0].Command[0] != "/bin/true" || h2.post[0].Timeout != DefaultHookTimeout {
		t.Errorf("specs: %+v", h2.post)
	}
	h2.Close(t.Context())
}
