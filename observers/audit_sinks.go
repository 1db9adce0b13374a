package observers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
)

// auditMaxLine bounds one line when replaying a file; records are a few
// hundred bytes (payloads are capped at noeta.PayloadMaxBytes).
const auditMaxLine = 1 << 20

// AuditFileConfig configures [NewAuditFileSink].
type AuditFileConfig struct {
	// Path is the JSON Lines file, created (with its directory) if missing,
	// mode 0600.
	Path string
	// SyncEvery is how often written records are fsynced: 0 fsyncs after
	// every record, before Write returns. Above 0, a crash of the machine
	// (not of the process) can lose the records of the last interval, which
	// a feed will not deliver again: they were acknowledged.
	SyncEvery time.Duration
	Logger    *slog.Logger // slog.Default() if nil
}

// AuditFileSink appends audit records to a JSON Lines file, one record a
// line. Each record reaches the operating system in one write before Write
// returns, so a crash of the process loses nothing that was acknowledged and
// tears at most the line being written; fsync follows every record, or every
// SyncEvery.
//
// Several sinks — in several processes, observer workers sharing one
// audit group — may write one file: it is an [AuditSharedSink]. Every write
// happens under an exclusive flock on the file, after the Audit has read
// what the others appended since its last write, so each record is written
// once and chains on from its task's last record whoever wrote that. (Where
// the platform has no flock, one writer per file is the operator's to
// ensure.)
//
// Under the lock, bytes after the last newline can only be a line torn by a
// writer that crashed mid-write: they are removed, with a warning. It is an
// [AuditReplayer], so an [Audit] over it continues the chains the file
// holds. A write or fsync that
// fails is returned; after a failed fsync, or a failed write it could not
// undo, the sink refuses every later record — the file's state is then
// unknown — and the process must reopen it.
type AuditFileSink struct {
	path      string
	syncEvery time.Duration
	log       *slog.Logger

	mu      sync.Mutex
	f       *os.File
	size    int64 // the end of the last whole record
	readOff int64 // how far the lines have been handed to a reader
	dirty   bool  // written since the last fsync
	err     error // sticky: the sink is broken
	closed  bool
	buf     []byte

	stop chan struct{}
	done chan struct{}
}

// NewAuditFileSink opens (or creates) the audit file and recovers a torn last
// line.
func NewAuditFileSink(cfg AuditFileConfig) (*AuditFileSink, error) {
	if cfg.Path == "" {
		return nil, fmt.Errorf("%w: AuditFileConfig.Path is empty", ErrInvalidConfig)
	}
	if cfg.SyncEvery < 0 {
		return nil, fmt.Errorf("%w: AuditFileConfig.SyncEvery is negative", ErrInvalidConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dir := filepath.Dir(cfg.Path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("observers: audit file: %w", err)
	}
	_, statErr := os.Stat(cfg.Path)
	created := errors.Is(statErr, os.ErrNotExist)
	f, err := os.OpenFile(cfg.Path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("observers: audit file: %w", err)
	}
	s := &AuditFileSink{path: cfg.Path, syncEvery: cfg.SyncEvery, log: cfg.Logger.With("audit_file", cfg.Path), f: f}
	if err := s.open(created, dir); err != nil {
		_ = f.Close()
		return nil, err
	}
	if s.syncEvery > 0 {
		s.stop, s.done = make(chan struct{}), make(chan struct{})
		go s.syncLoop()
	}
	return s, nil
}

func (s *AuditFileSink) open(created bool, dir string) error {
	if err := auditLockFile(s.f); err != nil {
		return fmt.Errorf("observers: audit file %s: lock: %w", s.path, err)
	}
	defer func() { _ = auditUnlockFile(s.f) }()
	if err := s.repairLocked(); err != nil {
		return err
	}
	if created {
		// Make the new file's name durable too.
		if d, err := os.Open(dir); err == nil {
			_ = d.Sync()
			_ = d.Close()
		}
	}
	return nil
}

// repairLocked, with the flock held, finds the end of the last whole line and
// removes what follows it: no writer is mid-write while the lock is held, so
// it is a line torn by a crash.
func (s *AuditFileSink) repairLocked() error {
	st, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("observers: audit file: %w", err)
	}
	size := st.Size()
	if size == s.size {
		return nil
	}
	if size < s.size {
		// Cut short behind this sink's back (truncated, rotated by copy):
		// read again from wherever it now ends, or lines others append
		// there would be skipped.
		s.log.Warn("the audit file is shorter than this writer last saw it; reading on from its new end", "was", s.size, "now", size)
	}
	end, err := auditLastNewline(s.f, size)
	if err != nil {
		return fmt.Errorf("observers: audit file %s: %w", s.path, err)
	}
	if end < size {
		if err := s.f.Truncate(end); err != nil {
			return fmt.Errorf("observers: audit file %s: remove the torn last line: %w", s.path, err)
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("observers: audit file %s: %w", s.path, err)
		}
		s.log.Warn("removed a torn last line from the audit file (a write cut short by a crash); its record is written again when it is delivered again",
			"offset", end, "bytes", size-end)
	}
	s.size = end
	s.readOff = min(s.readOff, s.size)
	return nil
}

// catchUpLocked hands fn every whole line from readOff to the end of the
// file (the flock held), and moves readOff there.
func (s *AuditFileSink) catchUpLocked(fn func(line []byte) error) error {
	if err := s.repairLocked(); err != nil {
		return err
	}
	if s.readOff >= s.size {
		return nil
	}
	sc := bufio.NewScanner(io.NewSectionReader(s.f, s.readOff, s.size-s.readOff))
	sc.Buffer(make([]byte, 0, 64<<10), auditMaxLine)
	off, line := s.readOff, 0
	for sc.Scan() {
		line++
		if fn != nil {
			if err := fn(sc.Bytes()); err != nil {
				// Where, so an operator can find the record: a line number
				// when reading from the start, else the byte offset (the
				// lines this writer appended itself are not read back).
				where := fmt.Sprintf("byte %d", off)
				if s.readOff == 0 {
					where = fmt.Sprintf("line %d (byte %d)", line, off)
				}
				return fmt.Errorf("%s, %s: %w", s.path, where, err)
			}
		}
		off += int64(len(sc.Bytes())) + 1
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	s.readOff = s.size
	return nil
}

// Exclusive implements [AuditSharedSink].
func (s *AuditFileSink) Exclusive(catchUp func(line []byte) error, fn func(write func(rec []byte) error) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrAuditClosed
	}
	if s.err != nil {
		return s.err
	}
	if err := auditLockFile(s.f); err != nil {
		return fmt.Errorf("observers: audit file %s: lock: %w", s.path, err)
	}
	defer func() { _ = auditUnlockFile(s.f) }()
	if err := s.catchUpLocked(catchUp); err != nil {
		return err
	}
	return fn(s.appendLocked)
}

// auditLastNewline returns the offset just past the last newline of the
// first size bytes of f (0 if there is none).
func auditLastNewline(f *os.File, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

// Path returns the file's path.
func (s *AuditFileSink) Path() string { return s.path }

// Write implements [AuditSink]: one record appended under the file's lock.
// An [Audit] writes through Exclusive instead, which also reads what other
// writers appended.
func (s *AuditFileSink) Write(_ context.Context, _ string, rec []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrAuditClosed
	}
	if s.err != nil {
		return s.err
	}
	if err := auditLockFile(s.f); err != nil {
		return fmt.Errorf("observers: audit file %s: lock: %w", s.path, err)
	}
	defer func() { _ = auditUnlockFile(s.f) }()
	if err := s.repairLocked(); err != nil {
		return err
	}
	return s.appendLocked(rec)
}

// appendLocked appends one record with s.mu and the flock held.
func (s *AuditFileSink) appendLocked(rec []byte) error {
	if bytes.IndexByte(rec, '\n') >= 0 {
		return fmt.Errorf("observers: audit file %s: a record must be one line", s.path)
	}
	if s.err != nil {
		return s.err
	}
	s.buf = append(append(s.buf[:0], rec...), '\n')
	n, err := s.f.Write(s.buf)
	if err != nil {
		if n > 0 {
			if terr := s.f.Truncate(s.size); terr != nil {
				s.err = fmt.Errorf("observers: audit file %s: a failed write left a partial line that could not be removed (%v); reopen the file: %w", s.path, terr, err)
				return s.err
			}
		}
		return fmt.Errorf("observers: audit file %s: %w", s.path, err)
	}
	if s.readOff == s.size {
		// The writer knows its own record: it need not be read back.
		s.readOff += int64(n)
	}
	s.size += int64(n)
	s.dirty = true
	if s.syncEvery == 0 {
		return s.syncLocked()
	}
	return nil
}

// syncLocked fsyncs what was written since the last fsync. A failure breaks
// the sink for good: after a failed fsync the kernel may have dropped the
// pages, so nothing written since is known to be on disk.
func (s *AuditFileSink) syncLocked() error {
	if !s.dirty {
		return nil
	}
	if err := s.f.Sync(); err != nil {
		s.err = fmt.Errorf("observers: audit file %s: fsync failed, the file must be reopened: %w", s.path, err)
		return s.err
	}
	s.dirty = false
	return nil
}

func (s *AuditFileSink) syncLoop() {
	defer close(s.done)
	t := time.NewTicker(s.syncEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.mu.Lock()
			if !s.closed && s.err == nil {
				if err := s.syncLocked(); err != nil {
					s.log.Error("audit file fsync failed; the sink refuses further records", "err", err)
				}
			}
			s.mu.Unlock()
		}
	}
}

// Flush implements [AuditSink]: it fsyncs now.
func (s *AuditFileSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrAuditClosed
	}
	if s.err != nil {
		return s.err
	}
	return s.syncLocked()
}

// Close implements [AuditSink]: it fsyncs, closes the file and releases its
// lock.
func (s *AuditFileSink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.err == nil {
		err = s.syncLocked()
	}
	return errors.Join(err, s.f.Close())
}

// Replay implements [AuditReplayer]: it reads every whole line of the file,
// under the file's lock.
func (s *AuditFileSink) Replay(fn func(line []byte) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrAuditClosed
	}
	if err := auditLockFile(s.f); err != nil {
		return fmt.Errorf("observers: audit file %s: lock: %w", s.path, err)
	}
	defer func() { _ = auditUnlockFile(s.f) }()
	s.readOff = 0
	return s.catchUpLocked(fn)
}

// AuditWriterSink writes audit records to an io.Writer (stdout, say), one a
// line, each in a single Write. It cannot replay, so an [Audit] over it starts
// with no state.
type AuditWriterSink struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewAuditWriterSink returns a sink writing to w. Close does not close w.
func NewAuditWriterSink(w io.Writer) *AuditWriterSink { return &AuditWriterSink{w: w} }

// Write implements [AuditSink].
func (s *AuditWriterSink) Write(_ context.Context, _ string, rec []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(append(s.buf[:0], rec...), '\n')
	_, err := s.w.Write(s.buf)
	return err
}

// Flush implements [AuditSink]: it flushes w when w has a Flush method.
func (s *AuditWriterSink) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// Close implements [AuditSink]: it flushes.
func (s *AuditWriterSink) Close() error { return s.Flush() }

// AuditPublisher publishes one message; *nats.Conn implements it.
type AuditPublisher interface {
	Publish(subject string, data []byte) error
}

// AuditPublishSink publishes each audit record as one message, to a fixed
// subject or to <subject>.<task>. Publishing is at-most-once unless a
// JetStream stream captures the subject; consumers dedupe by (task, seq) or
// (task, key), both in the record. It cannot replay, so an [Audit] over it
// starts with no state.
type AuditPublishSink struct {
	p       AuditPublisher
	subject string
	perTask bool
}

// NewAuditPublishSink returns a sink publishing with p to subject, or to
// subject.<task> when perTask.
func NewAuditPublishSink(p AuditPublisher, subject string, perTask bool) (*AuditPublishSink, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: audit publisher is nil", ErrInvalidConfig)
	}
	if err := auditValidateSubject(subject); err != nil {
		return nil, err
	}
	return &AuditPublishSink{p: p, subject: subject, perTask: perTask}, nil
}

func auditValidateSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("%w: audit subject is empty", ErrInvalidConfig)
	}
	for tok := range strings.SplitSeq(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return fmt.Errorf("%w: audit subject %q is not a literal subject (empty token, wildcard or whitespace)", ErrInvalidConfig, subject)
		}
	}
	return nil
}

// Subject returns the subject a record of task is published to.
func (s *AuditPublishSink) Subject(task string) string {
	if s.perTask {
		return s.subject + "." + task
	}
	return s.subject
}

// Write implements [AuditSink].
func (s *AuditPublishSink) Write(_ context.Context, task string, rec []byte) error {
	if s.perTask {
		if err := noeta.ValidateTaskID(task); err != nil {
			return err
		}
	}
	return s.p.Publish(s.Subject(task), rec)
}

// Flush implements [AuditSink]: it flushes the publisher when it has a Flush
// method (*nats.Conn does: a round trip to the server).
func (s *AuditPublishSink) Flush() error {
	if f, ok := s.p.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// Close implements [AuditSink]: it flushes; the publisher stays open.
func (s *AuditPublishSink) Close() error { return s.Flush() }
