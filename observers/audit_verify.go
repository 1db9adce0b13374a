package observers

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/internal/boundedio"
)

// AuditReport is what [VerifyAudit] found.
type AuditReport struct {
	Records int // lines read
	Tasks   int // distinct tasks among them
	// FirstBroken is the first record that breaks the trail, nil when it is
	// intact.
	FirstBroken *AuditBreak
}

// AuditBreak names a record that breaks the trail, and why.
type AuditBreak struct {
	Line int    // 1-based line number
	Task string // "" when the line has no readable task
	Seq  uint64 // the record's seq (log records)
	Key  string // the record's key (inbox records)
	Why  string
}

// OK reports whether every record checked out.
func (r AuditReport) OK() bool { return r.FirstBroken == nil }

// String reads "ok: 1234 records, 56 tasks, chains intact" or "broken at line
// 17 (task X seq 5): prev does not match the hash of line 12".
func (r AuditReport) String() string {
	if r.FirstBroken == nil {
		return fmt.Sprintf("ok: %d records, %d tasks, chains intact", r.Records, r.Tasks)
	}
	return r.FirstBroken.String()
}

func (b AuditBreak) String() string {
	where := ""
	switch {
	case b.Task != "" && b.Key != "":
		where = fmt.Sprintf(" (task %s key %s)", b.Task, b.Key)
	case b.Task != "" && b.Seq > 0:
		where = fmt.Sprintf(" (task %s seq %d)", b.Task, b.Seq)
	case b.Task != "":
		where = fmt.Sprintf(" (task %s)", b.Task)
	}
	return fmt.Sprintf("broken at line %d%s: %s", b.Line, where, b.Why)
}

// MaxAuditLine is the longest line [VerifyAudit] reads: 1 MiB. An audit
// record is a few KiB (payloads over 4 KiB are stored by reference); a longer
// line is reported as a broken record, and skipped without being held in
// memory.
const MaxAuditLine = 1 << 20

// VerifyAuditFile is [VerifyAuditFileContext] with a context that never ends.
func VerifyAuditFile(path string) (AuditReport, error) {
	return VerifyAuditFileContext(context.Background(), path)
}

// VerifyAuditFileContext verifies the audit file at path, a regular file
// (a directory, a FIFO or a device is refused without being read), until
// ctx ends; see [VerifyAudit]. Its size is not limited: memory grows with
// the number of distinct tasks in it, not with its length.
func VerifyAuditFileContext(ctx context.Context, path string) (AuditReport, error) {
	f, _, err := boundedio.Open(path)
	if err != nil {
		return AuditReport{}, fmt.Errorf("observers: audit verify: %w", err)
	}
	defer f.Close()
	rep, err := VerifyAudit(boundedio.Reader(ctx, f))
	if err != nil {
		return rep, fmt.Errorf("observers: audit verify %s: %w", path, err)
	}
	return rep, nil
}

// verifyTask is what VerifyAudit remembers of a task.
type verifyTask struct {
	lastHash string
	lastLine int // the line of lastHash
	lastSeq  uint64
	seqLine  int // the line of lastSeq; 0 before the task's first log record
	keys     map[string]int
}

// VerifyAudit reads an audit trail in JSON Lines and checks, for every
// record, that it is an audit record of a known version, that its hash is
// the sha256 of its canonical JSON without the hash, that its prev is the
// hash of its task's previous record, that each task's log seqs go up by
// exactly one, and that no (task, seq) or (task, key) appears twice. It
// reports the first record that fails, and counts every line. A line over
// [MaxAuditLine] bytes is a broken record. The error is for reading problems
// only.
//
// A hash chain shows an edited, inserted, deleted or reordered record, but
// not the loss of a task's last records, nor a trail rewritten from some
// point on with fresh hashes: keep the latest hashes somewhere else to catch
// those.
func VerifyAudit(r io.Reader) (AuditReport, error) {
	var rep AuditReport
	tasks := make(map[string]*verifyTask)
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	for {
		var readErr error
		line, readErr = readAuditLine(br, line[:0])
		if errors.Is(readErr, errLineTooLong) {
			rep.Records++
			if rep.FirstBroken == nil {
				rep.FirstBroken = &AuditBreak{Line: rep.Records, Why: fmt.Sprintf("the line is longer than the limit of %d KiB", MaxAuditLine>>10)}
			}
			continue
		}
		if len(line) == 0 && readErr != nil {
			if errors.Is(readErr, io.EOF) {
				break
			}
			return rep, readErr
		}
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return rep, readErr
		}
		torn := line[len(line)-1] != '\n'
		line = bytes.TrimSuffix(line, []byte{'\n'})
		rep.Records++
		brk := verifyAuditLine(rep.Records, line, torn, tasks)
		if brk != nil && rep.FirstBroken == nil {
			rep.FirstBroken = brk
		}
		if readErr != nil {
			break
		}
	}
	rep.Tasks = len(tasks)
	return rep, nil
}

var errLineTooLong = errors.New("line too long")

// readAuditLine appends the next line of br, with its newline, to buf. A line
// over MaxAuditLine bytes is read to its end and dropped: errLineTooLong.
func readAuditLine(br *bufio.Reader, buf []byte) ([]byte, error) {
	long := false
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			buf = append(buf, frag...)
			if len(buf) > MaxAuditLine+1 { // +1: the newline
				long, buf = true, buf[:0]
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if long && (err == nil || errors.Is(err, io.EOF)) {
			return buf, errLineTooLong
		}
		return buf, err
	}
}

// verifyAuditLine checks one line and advances its task's state; it returns
// the break, or nil.
func verifyAuditLine(n int, line []byte, torn bool, tasks map[string]*verifyTask) *AuditBreak {
	brk := &AuditBreak{Line: n}
	fail := func(format string, args ...any) *AuditBreak {
		brk.Why = fmt.Sprintf(format, args...)
		return brk
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return fail("empty line")
	}
	if _, err := noeta.CanonicalizeJSON(line); err != nil {
		if torn {
			return fail("torn last line (a write cut short; the audit removes it when it next opens the file): %v", err)
		}
		return fail("not a JSON record: %v", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return fail("not a JSON object: %v", err)
	}

	var task, key, prev, hash string
	var seq uint64
	var v int
	if err := auditField(fields, "task", &task); err != nil || task == "" {
		return fail("no task")
	}
	brk.Task = task
	ts := tasks[task]
	if ts == nil {
		ts = &verifyTask{}
		tasks[task] = ts
	}
	_, hasSeq := fields["seq"]
	_, hasKey := fields["key"]
	switch {
	case hasSeq == hasKey:
		return fail("want exactly one of seq and key")
	case hasSeq:
		if err := auditField(fields, "seq", &seq); err != nil || seq == 0 {
			return fail("seq is not a positive integer")
		}
		brk.Seq = seq
	default:
		if err := auditField(fields, "key", &key); err != nil || key == "" {
			return fail("key is not a non-empty string")
		}
		brk.Key = key
	}
	// Whatever else is wrong with the record, it is the task's last one
	// now: later records are checked against it.
	defer func() {
		ts.lastHash, ts.lastLine = hash, n
		if hasSeq {
			ts.lastSeq, ts.seqLine = seq, n
		} else {
			if ts.keys == nil {
				ts.keys = make(map[string]int)
			}
			if _, dup := ts.keys[key]; !dup {
				ts.keys[key] = n
			}
		}
	}()
	if err := auditField(fields, "hash", &hash); err != nil {
		return fail("no hash")
	}
	if err := auditField(fields, "v", &v); err != nil || v != AuditRecordVersion {
		return fail("v is %s, want %d (not an audit record of a version this verifier knows)", cmp.Or(string(fields["v"]), "missing"), AuditRecordVersion)
	}
	if err := auditField(fields, "prev", &prev); err != nil {
		return fail("no prev")
	}

	delete(fields, "hash")
	body, err := json.Marshal(fields)
	if err == nil {
		body, err = noeta.CanonicalizeJSON(body)
	}
	if err != nil {
		return fail("cannot re-encode the record: %v", err)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != hash {
		return fail("hash does not match the record's content (the record was changed after it was written)")
	}

	if hasSeq {
		switch {
		case ts.seqLine == 0:
		case seq == ts.lastSeq:
			return fail("duplicate of line %d (same task and seq)", ts.seqLine)
		case seq < ts.lastSeq:
			return fail("seq %d comes after seq %d (line %d): out of order or a duplicate", seq, ts.lastSeq, ts.seqLine)
		case seq > ts.lastSeq+1:
			return fail("seq %d follows seq %d (line %d): %s missing or out of order", seq, ts.lastSeq, ts.seqLine, auditSeqRange(ts.lastSeq+1, seq-1))
		}
	} else if at, dup := ts.keys[key]; dup {
		return fail("duplicate of line %d (same task and key)", at)
	}

	if prev != ts.lastHash {
		if ts.lastLine == 0 {
			return fail("prev is set but no earlier record of the task is in the trail (records are missing before this line)")
		}
		return fail("prev does not match the hash of line %d", ts.lastLine)
	}
	return nil
}

func auditField(fields map[string]json.RawMessage, name string, dst any) error {
	raw, ok := fields[name]
	if !ok {
		return fmt.Errorf("no %s", name)
	}
	return json.Unmarshal(raw, dst)
}

func auditSeqRange(from, to uint64) string {
	if from == to {
		return "seq " + strconv.FormatUint(from, 10) + " is"
	}
	return fmt.Sprintf("seqs %d to %d are", from, to)
}
