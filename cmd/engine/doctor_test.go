package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/noeta-go/noeta/eventlog/jetstream/jshost"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// corruptTaskFile runs six turns of two echo calls and finishes: 42 records.
const corruptTaskFile = `
agent: researcher
goal: echo a lot
script:
  - tool_calls: [{tool: echo, args: {text: a}}, {tool: echo, args: {text: b}}]
  - tool_calls: [{tool: echo, args: {text: c}}, {tool: echo, args: {text: d}}]
  - tool_calls: [{tool: echo, args: {text: e}}, {tool: echo, args: {text: f}}]
  - tool_calls: [{tool: echo, args: {text: g}}, {tool: echo, args: {text: h}}]
  - tool_calls: [{tool: echo, args: {text: i}}, {tool: echo, args: {text: j}}]
  - tool_calls: [{tool: echo, args: {text: k}}, {tool: echo, args: {text: l}}]
  - finish: {answer: done}
`

// seededStore is a real store: two tasks run one after the other with the
// embedded server on a data directory, which is then shut down. ids maps
// each task to the record id of every seq of its log.
type seededStore struct {
	data  string
	tasks [2]string
	ids   [2]map[int]string
}

// seedStore runs two tasks on a fresh data directory, with the extra
// flags (e.g. the batch mode).
func seedStore(t *testing.T, flags ...string) seededStore {
	t.Helper()
	s := seededStore{data: t.TempDir()}
	file := writeFile(t, "echo.yaml", corruptTaskFile)
	ws := workspace(t)
	for i := range s.tasks {
		code, out, errb := runCmd(t, append([]string{"run", file, "--config", exampleConfig, "--data", s.data, "--workspace", ws}, flags...)...)
		if code != 0 {
			t.Fatalf("run: exit %d\n%s\n%s", code, out, errb)
		}
		s.tasks[i] = regexp.MustCompile(`task ([0-9A-Z]{26})`).FindStringSubmatch(out)[1]
		code, out, errb = runCmd(t, "events", s.tasks[i], "--json", "--data", s.data)
		if code != 0 {
			t.Fatalf("events: exit %d\n%s", code, errb)
		}
		s.ids[i] = map[int]string{}
		for line := range strings.Lines(out) {
			var ce struct {
				ID  string `json:"id"`
				Seq string `json:"sequence"`
			}
			if err := json.Unmarshal([]byte(line), &ce); err != nil {
				t.Fatal(err)
			}
			if ce.Seq != "" {
				var n int
				for _, c := range ce.Seq {
					n = n*10 + int(c-'0')
				}
				s.ids[i][n] = ce.ID
			}
		}
		if len(s.ids[i]) != 42 {
			t.Fatalf("task %s has %d records, want 42", s.tasks[i], len(s.ids[i]))
		}
	}
	return s
}

// copyStore copies the data directory, as an operator would before
// experimenting on it.
func copyStore(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// taskStreamDir is where the embedded server keeps the task stream.
func taskStreamDir(data string) string {
	return filepath.Join(data, "nats", "jetstream", "$G", "streams", "NOETA_TASKS")
}

// blockWith returns the message block of the task stream holding needle
// and needle's offset in it.
func blockWith(t *testing.T, data, needle string) (string, int) {
	t.Helper()
	blks, err := filepath.Glob(filepath.Join(taskStreamDir(data), "msgs", "*.blk"))
	if err != nil || len(blks) == 0 {
		t.Fatalf("no message blocks under %s (%v)", taskStreamDir(data), err)
	}
	for _, blk := range blks {
		b, err := os.ReadFile(blk)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, []byte(needle)); i >= 0 {
			return blk, i
		}
	}
	t.Fatalf("no message block holds %q", needle)
	return "", 0
}

// TestDoctorFindsCorruption damages copies of a real store's task stream
// the ways issue 12 lists, restarts the server on each, and runs engine
// doctor and the read verbs. Before, each damage was silent:
//
//   - flipped bytes in record #37 of a message block: the server drops the
//     record when its checksum fails; events printed #36 then #38 and exited
//     0, inspect folded over the hole;
//   - a block truncated inside task B's record #20: events, inspect and tasks
//     showed B ending at #19, running (inspect) and terminal (tasks), exit 0;
//   - an emptied block: every log gone, tasks listed nothing, exit 0;
//   - the stream's directory removed: the next verb created a fresh, empty
//     stream and all history was gone for good;
//   - flipped bytes in the last row of the dispatcher's bucket (task B's):
//     doctor listed the rows with a key watcher, which waits for as many
//     messages as the stream counts and was never handed the unloadable
//     one, so doctor hung until interrupted;
//   - flipped bytes in task A's last record (#42): the server still counts
//     it and cannot load it, and listing the tasks failed with "jetstream:
//     no message": doctor and tasks exited 1 naming no task.
//
// Now doctor exits 1 and names the task and seqs of each loss, the read
// verbs exit 1 naming them, and a removed stream is not recreated.
//
// The store is written one record per message (--batch sequential), so each
// damage names the exact records and messages it loses;
// TestDoctorFindsCorruptionPacked damages the default layout.
func TestDoctorFindsCorruption(t *testing.T) {
	s := seedStore(t, "--batch", "sequential")
	a, b := s.tasks[0], s.tasks[1]

	code, out, errb := runCmd(t, "doctor", "--data", copyStore(t, s.data))
	if code != 0 || !strings.Contains(out, "clean: 2 tasks, 84 records, 2 dispatcher rows") {
		t.Fatalf("doctor on the undamaged store: exit %d\n%s\n%s", code, out, errb)
	}

	tests := []struct {
		name   string
		damage func(t *testing.T, data string)
		// doctor must print each line; verbs are read verbs that must exit
		// 1 with the text in stderr.
		doctor []string
		verbs  map[string][]string
		want   string // in their stderr
	}{{
		name: "flipped bytes",
		damage: func(t *testing.T, data string) {
			flipRecord(t, data, s.ids[0][37])
		},
		doctor: []string{"gap task " + a + " seq 37: ", "missing seq 37 (seq 36 is followed by seq 38)"},
		verbs:  map[string][]string{"events": {"events", a}, "inspect": {"inspect", a}, "tasks": {"tasks"}},
		want:   "gap in the log of task " + a + ": missing seq 37",
	}, {
		name: "truncated block",
		damage: func(t *testing.T, data string) {
			blk, at := blockWith(t, data, s.ids[1][20])
			if err := os.Truncate(blk, int64(at)); err != nil {
				t.Fatal(err)
			}
		},
		doctor: []string{"stream_loss: jetstream: stream NOETA_TASKS lost 23 of its 84 messages: stream sequences 62-84",
			"tail_lost task " + b + " seq 20-: the dispatcher says the task ended (\"completed\"), but the log ends at seq 19"},
		verbs: map[string][]string{"events": {"events", b}, "inspect": {"inspect", b}},
		want:  "task " + b + ": seq 20-",
	}, {
		name: "emptied block",
		damage: func(t *testing.T, data string) {
			blk, _ := blockWith(t, data, s.ids[0][1])
			if err := os.Truncate(blk, 0); err != nil {
				t.Fatal(err)
			}
		},
		doctor: []string{"stream sequences 1-84 (its first sequence is 85)",
			"row_without_log task " + a + " seq 1-: ", "row_without_log task " + b + " seq 1-: "},
		verbs: map[string][]string{"events": {"events", a}, "inspect": {"inspect", b}, "tasks": {"tasks"}},
		want:  "lost",
	}, {
		name: "removed stream",
		damage: func(t *testing.T, data string) {
			if err := os.RemoveAll(taskStreamDir(data)); err != nil {
				t.Fatal(err)
			}
		},
		doctor: []string{"stream_lost: ", "task stream NOETA_TASKS is missing while KV_noeta_idempotency exists"},
		verbs:  map[string][]string{"events": {"events", a}, "tasks": {"tasks"}},
		want:   "its history is lost",
	}, {
		name: "flipped row",
		damage: func(t *testing.T, data string) {
			blks, err := filepath.Glob(filepath.Join(data, "nats", "jetstream", "$G", "streams", "KV_noeta_tasks", "msgs", "*.blk"))
			if err != nil || len(blks) != 1 {
				t.Fatalf("row blocks %v (%v), want one", blks, err)
			}
			buf, err := os.ReadFile(blks[0])
			if err != nil {
				t.Fatal(err)
			}
			at := bytes.LastIndex(buf, []byte(b)) // the subject of the bucket's last message
			if at < 0 {
				t.Fatalf("no row of %s in %s", b, blks[0])
			}
			for i := at; i < at+26; i++ {
				buf[i] ^= 0xff
			}
			if err := os.WriteFile(blks[0], buf, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		doctor: []string{"log_without_row task " + b + ": "},
	}, {
		name: "flipped last record",
		damage: func(t *testing.T, data string) {
			flipRecord(t, data, s.ids[0][42])
		},
		doctor: []string{"corrupt task " + a + ": ", "the stream counts 42 message(s) on the subject and cannot load the last one"},
		verbs:  map[string][]string{"tasks": {"tasks"}},
		want:   "corrupt record of task " + a,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := copyStore(t, s.data)
			tt.damage(t, data)
			code, out, errb := runCmd(t, "doctor", "--data", data)
			t.Logf("doctor:\n%s%s", out, errb)
			if code != 1 {
				t.Errorf("doctor: exit %d, want 1", code)
			}
			for _, want := range tt.doctor {
				if !strings.Contains(out, want) {
					t.Errorf("doctor does not say %q", want)
				}
			}
			code, out, _ = runCmd(t, "doctor", "--data", data, "--json")
			var rep jshost.DoctorReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.Clean || len(rep.Problems) == 0 {
				t.Errorf("doctor --json: exit %d, %v, %+v", code, err, rep)
			}
			for name, args := range tt.verbs {
				code, _, errb := runCmd(t, append(args, "--data", data)...)
				if code != 1 || !strings.Contains(errb, tt.want) {
					t.Errorf("%s: exit %d, want 1 saying %q; stderr:\n%s", name, code, tt.want, errb)
				}
			}
			if tt.name == "removed stream" {
				if _, err := os.Stat(taskStreamDir(data)); !os.IsNotExist(err) {
					t.Errorf("the removed stream was created again (stat: %v)", err)
				}
			}
		})
	}
}

// TestDoctorRemote runs doctor with --nats against a server it does not
// start, on a store damaged through the NATS API the way a careless
// operator or a foreign client can: a content body deleted, a row deleted,
// garbage published on a task's log and inbox subjects. Before, nothing
// looked: a fold of the task failed only when it needed the body. Now each
// is a finding naming the task (and the seq or stream sequence), exit 1.
func TestDoctorRemote(t *testing.T) {
	t.Parallel()
	srv, err := embedded.Start(t.Context(), embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	conn := []string{"--nats", srv.ClientURL(), "--prefix", "doc"}
	submit := func() string {
		code, out, errb := runCmd(t, append([]string{"submit", example("01-allowed-call.yaml"), "--config", exampleConfig}, conn...)...)
		if code != 0 {
			t.Fatalf("submit: exit %d\n%s", code, errb)
		}
		return strings.TrimSpace(out)
	}
	a, b := submit(), submit()
	code, out, errb := runCmd(t, append([]string{"doctor"}, conn...)...)
	if code != 0 || !strings.Contains(out, "clean: 2 tasks, 2 records, 2 dispatcher rows") {
		t.Fatalf("doctor on a sound store: exit %d\n%s\n%s", code, out, errb)
	}

	ctx := t.Context()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// a's script body goes.
	code, out, _ = runCmd(t, append([]string{"events", a, "--json"}, conn...)...)
	if code != 0 {
		t.Fatalf("events: exit %d", code)
	}
	hash := regexp.MustCompile(`"script_ref":\{"hash":"([^"]+)"`).FindStringSubmatch(out)
	if hash == nil {
		t.Fatalf("no script_ref in %s", out)
	}
	// A body that fits a message is on the content stream (ADR 0111).
	bodies, err := js.Stream(ctx, "DOC_CONTENT")
	if err != nil {
		t.Fatal(err)
	}
	body, err := bodies.GetLastMsgForSubject(ctx, "doc.content."+hash[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := bodies.DeleteMsg(ctx, body.Sequence); err != nil {
		t.Fatal(err)
	}
	// b's row goes.
	rows, err := js.KeyValue(ctx, "doc_tasks")
	if err != nil {
		t.Fatal(err)
	}
	if err := rows.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	// Garbage on a's log and on b's inbox.
	logAck, err := js.Publish(ctx, fmt.Sprintf("doc.t.%d.%s.log", noeta.Partition(a), a), []byte("not a record"))
	if err != nil {
		t.Fatal(err)
	}
	inAck, err := js.Publish(ctx, fmt.Sprintf("doc.t.%d.%s.in.junk", noeta.Partition(b), b), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}

	code, out, errb = runCmd(t, append([]string{"doctor"}, conn...)...)
	t.Logf("doctor:\n%s%s", out, errb)
	if code != 1 {
		t.Errorf("doctor: exit %d, want 1", code)
	}
	for _, want := range []string{
		fmt.Sprintf("corrupt task %s stream seq %d: ", a, logAck.Sequence),
		"content_missing task " + a + " seq 1: TaskCreated.script_ref names body " + hash[1],
		"log_without_row task " + b + ": ",
		fmt.Sprintf("inbox_corrupt task %s stream seq %d: ", b, inAck.Sequence),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor does not say %q", want)
		}
	}
}

// TestDoctorFindsCorruptionPacked: on the default layout, where the records
// of a turn share one message (ADR 0040), flipped bytes in the message that
// holds record 37 lose that record and the others of its pack: doctor and
// the read verbs name a gap that covers seq 37 and no more than one batch,
// never a partial pack.
func TestDoctorFindsCorruptionPacked(t *testing.T) {
	s := seedStore(t)
	a := s.tasks[0]
	data := copyStore(t, s.data)
	flipRecord(t, data, s.ids[0][37])
	code, out, errb := runCmd(t, "doctor", "--data", data)
	t.Logf("doctor:\n%s%s", out, errb)
	m := regexp.MustCompile(`gap task ` + a + ` seq (\d+)(?:-(\d+))?: `).FindStringSubmatch(out)
	if code != 1 || m == nil {
		t.Fatalf("doctor: exit %d, want 1 and a gap in task %s", code, a)
	}
	from, _ := strconv.Atoi(m[1])
	to := from
	if m[2] != "" {
		to, _ = strconv.Atoi(m[2])
	}
	if from > 37 || to < 37 || to-from+1 > 5 {
		t.Errorf("gap seq %d-%d, want one pack (at most 5 records) covering seq 37", from, to)
	}
	code, _, errb = runCmd(t, "events", a, "--data", data)
	if code != 1 || !strings.Contains(errb, "gap in the log of task "+a) {
		t.Errorf("events: exit %d, want 1 naming the gap; stderr:\n%s", code, errb)
	}
}

// flipRecord flips the 26 bytes of a record's id where the store holds it,
// as a disk's bad sector would.
func flipRecord(t *testing.T, data, id string) {
	t.Helper()
	blk, at := blockWith(t, data, id)
	buf, err := os.ReadFile(blk)
	if err != nil {
		t.Fatal(err)
	}
	for i := at; i < at+26; i++ {
		buf[i] ^= 0xff
	}
	if err := os.WriteFile(blk, buf, 0o600); err != nil {
		t.Fatal(err)
	}
}
