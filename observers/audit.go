package observers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// AuditRecordVersion is the "v" of every audit record this package writes.
const AuditRecordVersion = 1

// AuditTextMax bounds the error text (and a decode error) copied into an
// audit record, in bytes, cut at a character boundary. Error text may echo a
// tool's arguments or output; the cut keeps the gist and bounds the leak.
const AuditTextMax = 512

var (
	// ErrAuditGap is returned by [Audit.Observe] for a log record whose
	// predecessor in its task's log has not been audited: it is not written
	// ahead of it, and a durable feed delivers it again later.
	ErrAuditGap = errors.New("observers: audit: log record arrived before its predecessor")
	// ErrAuditClosed is returned by a closed [Audit] or audit sink.
	ErrAuditClosed = errors.New("observers: audit: closed")
)

// AuditSink receives audit records, one JSON object per call, without a
// trailing newline. An [Audit] calls it from one goroutine at a time, in
// chain order. A record the sink returned an error for counts as not
// written: the Audit keeps its chains where they were and the record is
// offered again on redelivery, so a sink must leave nothing of a failed
// record behind (or stop accepting records).
type AuditSink interface {
	// Write hands over one record of task. The sink may keep rec.
	Write(ctx context.Context, task string, rec []byte) error
	// Flush makes what was written as durable as the sink can.
	Flush() error
	// Close flushes and releases the sink; later Writes fail.
	Close() error
}

// AuditReplayer is a sink that can read back every record it holds, oldest
// first, one line at a time (no newline). [NewAudit] replays such a sink to
// continue its chains and to skip what it already holds; [AuditFileSink] is
// one. fn may not keep line.
type AuditReplayer interface {
	Replay(fn func(line []byte) error) error
}

// AuditSharedSink is a sink that other writers — other processes — append
// to as well, the file sink: each record is decided (duplicate? which prev?)
// and written under the sink's lock, right after the Audit has caught up
// with every line the others appended. Several observer workers can then
// share one audit file, whichever of them a task's records reach.
type AuditSharedSink interface {
	AuditSink
	// Exclusive locks the sink against every other writer, hands catchUp
	// each line appended since this sink last read, then runs fn, whose
	// write appends one record, and unlocks.
	Exclusive(catchUp func(line []byte) error, fn func(write func(rec []byte) error) error) error
}

// AuditConfig configures [NewAudit].
type AuditConfig struct {
	// Sink receives the records (required). The Audit owns it: Close closes
	// it.
	Sink   AuditSink
	Logger *slog.Logger // slog.Default() if nil
	// Now stamps each record's audited_at (time.Now).
	Now func() time.Time
	// Log, when set, fills gaps: a log record that arrives ahead of its
	// predecessors (one was dropped by an in-process queue, or
	// dead-lettered by a feed) has the missing records read from the log
	// and audited first, so a task's chain never stops. Without it such a
	// record is refused with ErrAuditGap.
	Log eventlog.Reader
	// Context bounds the reads that fill gaps (context.Background()).
	Context context.Context
	// PartialFeed says the feed carries only the records committed in this
	// process (a host's in-process observers): a task submitted by another
	// process, or run there before its lease moved here, reaches the audit
	// with a gap where the other process's records are, filled from the log
	// as a matter of course and logged at debug level. A feed of every
	// record (observer-worker's durable consumers) has no such gaps: one is
	// a record the feed lost, and its fill is logged as a warning.
	PartialFeed bool
}

// AuditStats counts what an [Audit] did with the records offered to it.
type AuditStats struct {
	Written    uint64 // records handed to the sink
	Duplicates uint64 // records already audited, skipped
	Gaps       uint64 // log records that arrived before a predecessor
	GapsFilled uint64 // missing records read from the log and audited (with AuditConfig.Log)
	Malformed  uint64 // records written with malformed: true (the payload did not decode)
	Invalid    uint64 // envelopes with no task, or not exactly one of seq and key: refused
	SinkErrors uint64 // records the sink refused
	Tasks      int    // tasks with audit state in memory
}

// auditKeysInline is how many inbox keys a task keeps in a slice before it
// moves them to a map: most tasks have none or a few.
const auditKeysInline = 16

// auditTask is what an Audit remembers of one task.
type auditTask struct {
	lastSeq  uint64   // the last log seq audited
	lastHash [32]byte // the hash of the task's last audit record
	chained  bool     // lastHash is set
	keys     []string // inbox keys audited, up to auditKeysInline
	keySet   map[string]struct{}
}

func (ts *auditTask) hasKey(key string) bool {
	if ts.keySet != nil {
		_, ok := ts.keySet[key]
		return ok
	}
	return slices.Contains(ts.keys, key)
}

func (ts *auditTask) prev() string {
	if !ts.chained {
		return ""
	}
	return hex.EncodeToString(ts.lastHash[:])
}

func (ts *auditTask) advance(seq uint64, key string, hash [32]byte) {
	if key != "" && !ts.hasKey(key) {
		// Cloned: the envelope's string may share a whole message's memory.
		key = strings.Clone(key)
		switch {
		case ts.keySet != nil:
			ts.keySet[key] = struct{}{}
		case len(ts.keys) < auditKeysInline:
			ts.keys = append(ts.keys, key)
		default:
			ts.keySet = make(map[string]struct{}, 2*auditKeysInline)
			for _, k := range ts.keys {
				ts.keySet[k] = struct{}{}
			}
			ts.keySet[key] = struct{}{}
			ts.keys = nil
		}
	} else if key == "" && seq > ts.lastSeq {
		ts.lastSeq = seq
	}
	ts.lastHash, ts.chained = hash, true
}

// Audit writes the audit trail of every committed record, log and inbox: an
// allowlisted projection of each envelope that names who did what under
// which lease, which guard denied or asked for approval and why, who
// approved, and what it cost — never a payload body (goals, arguments,
// outputs, answers, results, patches, questions).
//
// # Record
//
// One JSON object per record, fields in this order:
//
//	v, task, seq (log records) or key (inbox records), type, time, origin,
//	actor, lease_gen, correlation_id, causation_id, trace_parent (if any),
//	envelope_id, the fields of the type (see below), audited_at, prev, hash
//
// time is the append time and audited_at the Audit's clock, both RFC 3339
// UTC with nanoseconds. By type:
//
//	ToolCallStarted        call_id, tool, turn, args_spilled
//	ToolCallFinished       call_id, tool, ok, duration_ms, cost_usd, error?, output_spilled
//	ToolCallDenied         call_id, tool, guard, reason, verdict "deny"
//	SubtaskDenied          agent, guard, reason, verdict "deny", group_id?
//	FinishDenied           guard, reason, verdict "deny"
//	ApprovalRequested      handle, action, guard, reason, verdict "require_approval", call_id?, tool?, agent?
//	GuardShadowed          action, call_id?, tool?, agent?, guard, rule?, shadow_verdict, reason,
//	                       failed?, decided, decided_by? (a shadow rule's would-be verdict has
//	                       no verdict field: a reader selecting verdicts sees only real ones)
//	ApprovalResolved       handle, decision, approver, reason?
//	TaskCreated            agent, parent_task_id?, root_task_id, subtask_depth, group_id?
//	SubtaskSpawned         subtask_id, agent, group_id?, call_id?
//	SubtaskCompleted,
//	SubtaskResultRecorded  subtask_id, status, group_id?, error?
//	PolicyDecided          turn, decision, cost_usd, input_tokens, output_tokens,
//	                       provider?, model?, latency_ms?, response_sha256? (a model's)
//	TurnStarted            turn
//	LeaseGranted           lease_id, generation, worker
//	TaskSuspended          reason, wake {kind, subtask_id?, group_id?, handle?, event_kind?, fire_at?}
//	TaskWoken              wake {kind, subtask_id?, group_id?, handle?, decision?, approver?, event_kind?, fire_at?}
//	StepAttemptAbandoned   baseline_seq, action, reason
//	TaskFailed             error, guard?
//	TaskCancelled          reason
//	TaskCompleted          answer_spilled
//	TaskSnapshot           upto_seq
//	TaskStatePatched and types outside the catalogue: the common fields only
//
// error fields are cut to [AuditTextMax] bytes. A payload that does not decode
// gives a record with malformed: true and decode_error instead of the fields
// of its type; it is never a failure.
//
// # Chain
//
// hash is the lowercase hex sha256 of the record's canonical JSON
// (noeta.CanonicalizeJSON) without the hash field; prev is the hash of the
// same task's previous audit record, "" for its first. A task's log records
// are chained in seq order; its inbox records join the same chain in the
// order they are audited, between whichever log records they came between.
// [VerifyAudit] checks every hash and link.
//
// # Idempotency and order
//
// A log record is written only right after its predecessor (seq = last+1):
// one at or below the last audited seq is a duplicate, skipped with a nil
// error; one above last+1 is refused with [ErrAuditGap] (and counted), so a
// durable feed delivers it again once its predecessor is in — a feed hands a
// task's records over in order, so a gap means a record lost upstream, or an
// in-process queue that dropped one. An inbox record is written once per
// (task, key). Given a sink that is an [AuditReplayer] (the file sink), the
// Audit rebuilds this state from it at construction, so a restarted worker
// continues its chains and skips what the file already holds; other sinks
// start empty (a restarted Audit on stdout or NATS starts new chains, prev
// "", and writes a redelivered record again).
//
// # Memory
//
// The Audit keeps, for every task it has seen (in the sink's replay or
// since), the last log seq, the last hash and the inbox keys: about 150
// bytes a task plus 60 to 100 bytes an inbox key (measured with ULID task
// ids), for the life of the process, since forgetting a task would let a
// redelivered record be written twice. It is unbounded by design: a million
// tasks with one inbox key each cost about 210 MB. Start a new file (with a
// new Audit) to bound it.
//
// It is safe for concurrent use; records are written one at a time.
type Audit struct {
	log  *slog.Logger
	now  func() time.Time
	mu   sync.Mutex
	sink AuditSink

	tasks  map[string]*auditTask
	stats  AuditStats
	closed bool

	// What reading back found: records, broken prev links, the first.
	replayed, broken, firstBroken int

	gapLog eventlog.Reader
	gapCtx context.Context
	// gapLevel is the level a filled gap is logged at (PartialFeed).
	gapLevel slog.Level
}

var _ Observer = (*Audit)(nil)

// NewAudit returns the audit observer writing to cfg.Sink, after replaying
// the sink when it is an [AuditReplayer].
func NewAudit(cfg AuditConfig) (*Audit, error) {
	if cfg.Sink == nil {
		return nil, fmt.Errorf("%w: AuditConfig.Sink is nil", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Audit{
		log:      cfg.Logger.With("observer", "audit"),
		now:      cfg.Now,
		sink:     cfg.Sink,
		tasks:    make(map[string]*auditTask),
		gapLog:   cfg.Log,
		gapCtx:   cfg.Context,
		gapLevel: slog.LevelWarn,
	}
	if a.gapCtx == nil {
		a.gapCtx = context.Background()
	}
	if cfg.PartialFeed {
		a.gapLevel = slog.LevelDebug
	}
	if r, ok := cfg.Sink.(AuditReplayer); ok {
		if err := a.rebuild(r); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Name implements [Observer].
func (a *Audit) Name() string { return "audit" }

// Stats returns the counters.
func (a *Audit) Stats() AuditStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Tasks = len(a.tasks)
	return s
}

// Observe implements [Observer]: it writes env's audit record unless it was
// audited already. An error means nothing was written.
func (a *Audit) Observe(ctx context.Context, env eventlog.Envelope) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrAuditClosed
	}
	if env.Task == "" || (env.Seq == 0) == (env.Key == "") {
		a.stats.Invalid++
		return fmt.Errorf("%w: audit: envelope %s of type %s has task %q, seq %d and key %q: want a task and exactly one of seq and key",
			eventlog.ErrInvalidArgument, env.ID, env.Type, env.Task, env.Seq, env.Key)
	}
	if shared, ok := a.sink.(AuditSharedSink); ok {
		return shared.Exclusive(a.applyLine, func(write func([]byte) error) error {
			return a.observeLocked(env, write)
		})
	}
	return a.observeLocked(env, func(rec []byte) error { return a.sink.Write(ctx, env.Task, rec) })
}

// observeLocked decides and writes env's record with a.mu held (and the
// sink's lock, for a shared sink).
func (a *Audit) observeLocked(env eventlog.Envelope, write func([]byte) error) error {
	ts, known := a.tasks[env.Task]
	if !known {
		ts = &auditTask{}
	}
	if env.Seq > 0 {
		if env.Seq <= ts.lastSeq {
			a.stats.Duplicates++
			return nil
		}
		if env.Seq > ts.lastSeq+1 {
			a.stats.Gaps++
			if err := a.fillGap(env, ts, known, write); err != nil {
				return fmt.Errorf("%w: task %s seq %d (%s) came before seq %d: %v", ErrAuditGap, env.Task, env.Seq, env.Type, ts.lastSeq+1, err)
			}
			known = true
		}
	} else if ts.hasKey(env.Key) {
		a.stats.Duplicates++
		return nil
	}

	rec, hash, decodeErr, err := buildAuditRecord(env, ts.prev(), a.now())
	if err != nil {
		return err
	}
	if err := write(rec); err != nil {
		a.stats.SinkErrors++
		return fmt.Errorf("observers: audit: write task %s %s: %w", env.Task, auditPosition(env.Seq, env.Key), err)
	}
	ts.advance(env.Seq, env.Key, hash)
	if !known {
		// Cloned: the envelope's string may share a whole message's memory.
		a.tasks[strings.Clone(env.Task)] = ts
	}
	a.stats.Written++
	if decodeErr != nil {
		a.stats.Malformed++
		a.log.Warn("audited a record whose payload does not decode", "task", env.Task, "seq", env.Seq, "key", env.Key, "type", env.Type, "err", decodeErr)
	}
	return nil
}

// fillGap audits the log records of env's task between the last audited and
// env, read from the log.
func (a *Audit) fillGap(env eventlog.Envelope, ts *auditTask, known bool, write func([]byte) error) error {
	if a.gapLog == nil {
		return errors.New("no log to read the missing records from")
	}
	missing, err := a.gapLog.Read(a.gapCtx, env.Task, ts.lastSeq)
	if err != nil {
		return err
	}
	for _, m := range missing {
		if m.Seq >= env.Seq {
			break
		}
		if m.Seq != ts.lastSeq+1 {
			return fmt.Errorf("the log has seq %d after seq %d", m.Seq, ts.lastSeq)
		}
		rec, hash, _, err := buildAuditRecord(m, ts.prev(), a.now())
		if err != nil {
			return err
		}
		if err := write(rec); err != nil {
			a.stats.SinkErrors++
			return err
		}
		ts.advance(m.Seq, "", hash)
		if !known {
			a.tasks[strings.Clone(env.Task)] = ts
			known = true
		}
		a.stats.Written++
		a.stats.GapsFilled++
	}
	if ts.lastSeq+1 != env.Seq {
		return fmt.Errorf("the log ends at seq %d", ts.lastSeq)
	}
	a.log.Log(a.gapCtx, a.gapLevel, "audited records missing from the feed by reading them from the log", "task", env.Task, "up_to_seq", env.Seq-1)
	return nil
}

// Flush flushes the sink (for the file sink: fsyncs now).
func (a *Audit) Flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrAuditClosed
	}
	return a.sink.Flush()
}

// Close flushes and closes the sink; later Observes fail with
// [ErrAuditClosed].
func (a *Audit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	return a.sink.Close()
}

// rebuild replays r into the per-task state.
func (a *Audit) rebuild(r AuditReplayer) error {
	a.replayed, a.broken, a.firstBroken = 0, 0, 0
	if err := r.Replay(a.applyLine); err != nil {
		return fmt.Errorf("observers: audit: rebuild from the sink: %w", err)
	}
	if a.broken > 0 {
		a.log.Warn("the audit trail's chains are broken; new records chain on from each task's last record; run audit verify",
			"records", a.replayed, "broken_links", a.broken, "first_broken_line", a.firstBroken)
	}
	if a.replayed > 0 {
		a.log.Info("audit state rebuilt from the sink", "records", a.replayed, "tasks", len(a.tasks))
	}
	return nil
}

// applyLine folds one record read back from the sink (written by this Audit
// before a restart, or by another writer of a shared sink) into the per-task
// state. A record the state already holds changes nothing.
func (a *Audit) applyLine(b []byte) error {
	a.replayed++
	var rec struct {
		Task string  `json:"task"`
		Seq  *uint64 `json:"seq"`
		Key  *string `json:"key"`
		Prev string  `json:"prev"`
		Hash string  `json:"hash"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return fmt.Errorf("the record read back is not an audit record: %v", err)
	}
	var hash [32]byte
	if n, err := hex.Decode(hash[:], []byte(rec.Hash)); err != nil || n != len(hash) || len(rec.Hash) != 2*len(hash) {
		return fmt.Errorf("the record read back has hash %q, not 64 hex digits", rec.Hash)
	}
	if rec.Task == "" || (rec.Seq == nil) == (rec.Key == nil) {
		return fmt.Errorf("the record read back needs a task and exactly one of seq and key")
	}
	ts := a.tasks[rec.Task]
	if ts == nil {
		ts = &auditTask{}
		a.tasks[strings.Clone(rec.Task)] = ts
	}
	var seq uint64
	var key string
	if rec.Seq != nil {
		seq = *rec.Seq
		if seq <= ts.lastSeq {
			return nil
		}
	} else {
		key = *rec.Key
		if ts.hasKey(key) {
			return nil
		}
	}
	if rec.Prev != ts.prev() {
		if a.broken++; a.broken == 1 {
			a.firstBroken = a.replayed
		}
	}
	ts.advance(seq, key, hash)
	return nil
}

func auditPosition(seq uint64, key string) string {
	if key != "" {
		return "key " + key
	}
	return "seq " + strconv.FormatUint(seq, 10)
}

// auditLine builds one JSON object in the field order it is given.
type auditLine struct{ b []byte }

func (l *auditLine) key(k string) {
	if len(l.b) > 1 {
		l.b = append(l.b, ',')
	}
	l.b = append(l.b, '"')
	l.b = append(l.b, k...)
	l.b = append(l.b, '"', ':')
}

func (l *auditLine) str(k, v string) {
	l.key(k)
	l.b = auditAppendString(l.b, v)
}

func (l *auditLine) strOpt(k, v string) {
	if v != "" {
		l.str(k, v)
	}
}

func (l *auditLine) uint(k string, v uint64) {
	l.key(k)
	l.b = strconv.AppendUint(l.b, v, 10)
}

func (l *auditLine) int(k string, v int64) {
	l.key(k)
	l.b = strconv.AppendInt(l.b, v, 10)
}

func (l *auditLine) float(k string, v float64) {
	l.key(k)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		l.b = append(l.b, "null"...)
		return
	}
	l.b = strconv.AppendFloat(l.b, v, 'g', -1, 64)
}

func (l *auditLine) bool(k string, v bool) {
	l.key(k)
	l.b = strconv.AppendBool(l.b, v)
}

func (l *auditLine) raw(k string, v []byte) {
	l.key(k)
	l.b = append(l.b, v...)
}

// auditAppendString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD.
func auditAppendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// auditCut cuts s to at most max bytes at a character boundary.
func auditCut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

func auditTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// buildAuditRecord returns env's audit record chained to prev, its hash, and
// the payload's decode error when it did not decode.
func buildAuditRecord(env eventlog.Envelope, prev string, now time.Time) (rec []byte, hash [32]byte, decodeErr, err error) {
	l := auditLine{b: make([]byte, 0, 640)}
	l.b = append(l.b, '{')
	l.int("v", AuditRecordVersion)
	l.str("task", env.Task)
	if env.Key != "" {
		l.str("key", env.Key)
	} else {
		l.uint("seq", env.Seq)
	}
	l.str("type", env.Type)
	l.str("time", auditTime(env.Time))
	l.str("origin", string(env.Origin))
	l.str("actor", env.Actor)
	l.uint("lease_gen", env.LeaseGen)
	l.str("correlation_id", env.CorrelationID)
	l.str("causation_id", env.CausationID)
	l.strOpt("trace_parent", env.TraceParent)
	l.str("envelope_id", env.ID)
	decodeErr = auditProject(&l, env)
	l.str("audited_at", auditTime(now))
	l.str("prev", prev)

	open := len(l.b)
	canon, err := noeta.CanonicalizeJSON(append(l.b, '}'))
	if err != nil {
		// Unreachable: the line is built from escaped strings and numbers.
		return nil, hash, nil, fmt.Errorf("observers: audit: record of task %s %s is not JSON: %w", env.Task, auditPosition(env.Seq, env.Key), err)
	}
	hash = sha256.Sum256(canon)
	l.b = l.b[:open]
	l.key("hash")
	l.b = append(l.b, '"')
	l.b = hex.AppendEncode(l.b, hash[:])
	l.b = append(l.b, '"', '}')
	return l.b, hash, decodeErr, nil
}

// auditProject appends the allowlisted fields of env's payload, or
// malformed and decode_error when it does not decode.
func auditProject(l *auditLine, env eventlog.Envelope) error {
	p, known, err := env.Decode()
	if err != nil {
		l.bool("malformed", true)
		l.str("decode_error", auditCut(err.Error(), AuditTextMax))
		return err
	}
	if !known {
		return nil
	}
	switch p := p.(type) {
	case *noeta.TaskCreated:
		l.str("agent", p.Agent)
		l.strOpt("parent_task_id", p.ParentTaskID)
		l.str("root_task_id", p.RootTaskID)
		l.int("subtask_depth", int64(p.SubtaskDepth))
		l.strOpt("group_id", p.GroupID)
	case *noeta.LeaseGranted:
		l.str("lease_id", p.LeaseID)
		l.uint("generation", p.Generation)
		l.str("worker", p.Worker)
	case *noeta.TurnStarted:
		l.int("turn", int64(p.Turn))
	case *noeta.PolicyDecided:
		l.int("turn", int64(p.Turn))
		l.str("decision", string(p.Decision))
		l.float("cost_usd", p.CostUSD)
		l.int("input_tokens", p.InputTokens)
		l.int("output_tokens", p.OutputTokens)
		// Which model decided, for a model policy (absent for a script).
		l.strOpt("provider", p.Provider)
		l.strOpt("model", p.Model)
		if p.LatencyMS > 0 {
			l.int("latency_ms", p.LatencyMS)
		}
		if p.ResponseRef != nil {
			l.str("response_sha256", p.ResponseRef.Hash)
		}
	case *noeta.ToolCallStarted:
		l.str("call_id", p.CallID)
		l.str("tool", p.Tool)
		l.int("turn", int64(p.Turn))
		l.bool("args_spilled", p.ArgsRef != nil)
	case *noeta.ToolCallFinished:
		l.str("call_id", p.CallID)
		l.str("tool", p.Tool)
		l.bool("ok", p.OK)
		l.int("duration_ms", p.DurationMS)
		l.float("cost_usd", p.CostUSD)
		l.strOpt("error", auditCut(p.Error, AuditTextMax))
		l.bool("output_spilled", p.OutputRef != nil)
	case *noeta.ToolCallDenied:
		l.str("call_id", p.CallID)
		l.str("tool", p.Tool)
		l.str("guard", p.Guard)
		l.str("reason", p.Reason)
		l.str("verdict", "deny")
	case *noeta.SubtaskSpawned:
		l.str("subtask_id", p.SubtaskID)
		l.str("agent", p.Agent)
		l.strOpt("group_id", p.GroupID)
		l.strOpt("call_id", p.CallID)
	case *noeta.SubtaskDenied:
		l.str("agent", p.Agent)
		l.str("guard", p.Guard)
		l.str("reason", p.Reason)
		l.str("verdict", "deny")
		l.strOpt("group_id", p.GroupID)
	case *noeta.FinishDenied:
		l.str("guard", p.Guard)
		l.str("reason", p.Reason)
		l.str("verdict", "deny")
	case *noeta.GuardShadowed:
		l.str("action", string(p.Action))
		l.strOpt("call_id", p.CallID)
		l.strOpt("tool", p.Tool)
		l.strOpt("agent", p.Agent)
		l.str("guard", p.Guard)
		l.strOpt("rule", p.Rule)
		l.str("shadow_verdict", p.Verdict.String())
		l.str("reason", p.Reason)
		if p.Failed {
			l.bool("failed", true)
		}
		l.str("decided", p.Decided.String())
		l.strOpt("decided_by", p.DecidedBy)
	case *noeta.ApprovalRequested:
		l.str("handle", p.Handle)
		l.str("action", string(p.Action))
		l.str("guard", p.Guard)
		l.str("reason", p.Reason)
		l.str("verdict", "require_approval")
		l.strOpt("call_id", p.CallID)
		l.strOpt("tool", p.Tool)
		l.strOpt("agent", p.Agent)
	case *noeta.ApprovalResolved:
		l.str("handle", p.Handle)
		l.str("decision", string(p.Decision))
		l.str("approver", p.Approver)
		l.strOpt("reason", p.Reason)
	case *noeta.SubtaskCompleted:
		auditSubtaskOutcome(l, p.SubtaskID, p.Status, p.GroupID, p.Error)
	case *noeta.SubtaskResultRecorded:
		auditSubtaskOutcome(l, p.SubtaskID, p.Status, p.GroupID, p.Error)
	case *noeta.TaskSuspended:
		l.str("reason", p.Reason)
		l.raw("wake", auditWake(p.WakeOn))
	case *noeta.TaskWoken:
		l.raw("wake", auditWake(p.WakeEvent))
	case *noeta.TaskSnapshot:
		l.uint("upto_seq", p.UptoSeq)
	case *noeta.StepAttemptAbandoned:
		l.uint("baseline_seq", p.BaselineSeq)
		l.str("action", string(p.Action))
		l.str("reason", p.Reason)
	case *noeta.TaskCompleted:
		l.bool("answer_spilled", p.AnswerRef != nil)
	case *noeta.TaskFailed:
		l.str("error", auditCut(p.Error, AuditTextMax))
		l.strOpt("guard", p.Guard)
	case *noeta.TaskCancelled:
		l.str("reason", p.Reason)
	case *noeta.TaskStatePatched:
		// The patch is a body: the type alone is audited.
	}
	return nil
}

func auditSubtaskOutcome(l *auditLine, subtask string, status noeta.SubtaskStatus, group, errText string) {
	l.str("subtask_id", subtask)
	l.str("status", string(status))
	l.strOpt("group_id", group)
	l.strOpt("error", auditCut(errText, AuditTextMax))
}

// auditWake projects a wake condition or event onto its identity and who
// answered: never its text, data or member list.
func auditWake(w noeta.Wake) []byte {
	l := auditLine{b: make([]byte, 0, 96)}
	l.b = append(l.b, '{')
	l.str("kind", string(w.Kind))
	l.strOpt("subtask_id", w.SubtaskID)
	l.strOpt("group_id", w.GroupID)
	l.strOpt("handle", w.Handle)
	l.strOpt("decision", w.Decision)
	l.strOpt("approver", w.Approver)
	l.strOpt("event_kind", w.EventKind)
	if !w.FireAt.IsZero() {
		l.str("fire_at", auditTime(w.FireAt))
	}
	return append(l.b, '}')
}
