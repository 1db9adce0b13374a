package jetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// SystemEmit implements eventlog.Writer: one message on the key's own inbox
// subject, published with expected last subject sequence 0, so the broker
// keeps a key to one write forever, with no dedupe window involved.
func (l *Log) SystemEmit(ctx context.Context, task, key string, env eventlog.Envelope) (eventlog.Envelope, error) {
	if err := l.check(ctx); err != nil {
		return eventlog.Envelope{}, err
	}
	env, err := eventlog.PrepareRecord(task, env)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	if err := noeta.ValidateToken("inbox key", key, eventlog.MaxInboxKeyLen); err != nil {
		return eventlog.Envelope{}, fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	if err := validatePayload(env, false); err != nil { // inbox records carry what others sent: always checked
		return eventlog.Envelope{}, err
	}
	if _, err := l.readTail(ctx, task); err != nil {
		var corrupt *CorruptRecordError
		if !errors.As(err, &corrupt) {
			return eventlog.Envelope{}, err
		}
	}
	subject := l.subj.inbox(task, key)
	existing := func() (eventlog.Envelope, error) {
		m, hdr, err := l.leaderGet(ctx, msgGetRequest{LastFor: subject})
		if err != nil {
			return eventlog.Envelope{}, err
		}
		r, err := decode(m.Subject, m.Sequence, hdr, m.Data)
		if err != nil {
			return eventlog.Envelope{}, err
		}
		return r.env, nil
	}
	if err := eventlog.CheckCap(env); err != nil {
		// A repeat of a written key says so before the cap does.
		if orig, gerr := existing(); gerr == nil {
			return orig, fmt.Errorf("%w: inbox key %s of task %s", eventlog.ErrAlreadyExists, key, task)
		}
		return eventlog.Envelope{}, err
	}
	env.Time = l.cfg.Now()
	env.ID = noeta.NewIDAt(env.Time)
	env.Seq, env.Key, env.LeaseGen = 0, key, 0
	msg, err := encode(subject, env, meta{})
	if err != nil {
		return eventlog.Envelope{}, err
	}
	_, wrong, err := l.publish(ctx, msg, 0)
	if err != nil || wrong {
		orig, gerr := existing()
		if gerr != nil {
			if err != nil {
				return eventlog.Envelope{}, fmt.Errorf("jetstream: inbox write %s/%s: %w", task, key, err)
			}
			return eventlog.Envelope{}, gerr
		}
		if orig.ID != env.ID {
			return orig, fmt.Errorf("%w: inbox key %s of task %s", eventlog.ErrAlreadyExists, key, task)
		}
	}
	l.subs.Notify(ctx, env)
	return env, nil
}

// Read implements eventlog.Reader. It reads up to the tail as the leader saw
// it when the read began, with an ordered consumer starting at the newest
// baseline at or before afterSeq+1 when the tail points at one.
func (l *Log) Read(ctx context.Context, task string, afterSeq uint64) ([]eventlog.Envelope, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	if err := noeta.ValidateTaskID(task); err != nil {
		return nil, fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	t, err := l.readTail(ctx, task)
	last := uint64(0) // the Seq the read must end at; 0: unknown
	if err != nil {
		var corrupt *CorruptRecordError
		if !errors.As(err, &corrupt) || l.cfg.OnCorrupt == nil {
			return nil, err
		}
		// The tail is unreadable; read to the end of the stream instead.
		t = tail{streamSeq: corrupt.StreamSeq, seq: ^uint64(0)}
	} else {
		last = t.seq
	}
	if afterSeq >= t.seq {
		return []eventlog.Envelope{}, nil
	}
	start := uint64(1)
	if t.baseline.seq != 0 && t.baseline.seq <= afterSeq+1 {
		start = t.baseline.streamSeq
	}
	out := []eventlog.Envelope{}
	err = l.scan(ctx, l.subj.log(task), start, t.streamSeq, func(r record) {
		if r.env.Seq > afterSeq {
			out = append(out, r.env)
		}
	})
	if err != nil {
		return out, err
	}
	// The server skips a message whose checksum fails and drops what a
	// truncated block held; either leaves a hole only the Seqs show.
	if err := eventlog.CheckDense(task, afterSeq, out, last); err != nil {
		l.corrupt.Add(1)
		if l.cfg.OnCorrupt == nil {
			return nil, err
		}
		l.cfg.OnCorrupt(err)
	}
	return out, nil
}

// scan delivers the records of subject from stream sequence start up to and
// including end, in order. end comes from the leader; a consumer served by a
// replica that lags is waited for, never taken as the end of the log. A
// transient failure (no responders while a consumer is placed, a timeout)
// restarts the scan after the last record delivered.
func (l *Log) scan(ctx context.Context, subject string, start, end uint64, fn func(record)) error {
	if l.direct {
		return l.directScan(ctx, subject, start, end, fn)
	}
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
			}
		}
		var next uint64
		next, err = l.scanOnce(ctx, subject, start, end, fn)
		if err == nil || !transient(err) {
			return err
		}
		start = next
	}
	return err
}

func transient(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrNoHeartbeat)
}

// scanOnce returns the stream sequence to resume from after an error.
func (l *Log) scanOnce(ctx context.Context, subject string, start, end uint64, fn func(record)) (uint64, error) {
	cons, err := l.js.OrderedConsumer(ctx, l.streamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
	})
	if err != nil {
		return start, fmt.Errorf("jetstream: read %s: %w", subject, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = l.js.DeleteConsumer(dctx, l.streamName, cons.CachedInfo().Name)
	}()
	for {
		if err := ctx.Err(); err != nil {
			return start, err
		}
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(l.cfg.RequestTimeout))
		if err != nil {
			return start, fmt.Errorf("jetstream: read %s: %w", subject, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return start, fmt.Errorf("jetstream: read %s: %w", subject, err)
			}
			start = md.Sequence.Stream + 1
			rs, err := decodeMsg(m.Subject(), md.Sequence.Stream, m.Headers(), m.Data())
			if err != nil {
				l.corrupt.Add(1)
				if l.cfg.OnCorrupt == nil {
					return start, err
				}
				l.cfg.OnCorrupt(err)
			}
			for _, r := range rs {
				fn(r)
			}
			if md.Sequence.Stream >= end {
				return start, nil
			}
		}
		if err := batch.Error(); err != nil {
			return start, fmt.Errorf("jetstream: read %s: %w", subject, err)
		}
		if got == 0 {
			return start, fmt.Errorf("jetstream: read %s: %w: nothing arrived before stream sequence %d within %v", subject, nats.ErrTimeout, end, l.cfg.RequestTimeout)
		}
	}
}

// Inbox implements eventlog.Reader.
func (l *Log) Inbox(ctx context.Context, task string) ([]eventlog.Envelope, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	if err := noeta.ValidateTaskID(task); err != nil {
		return nil, fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	if _, err := l.readTail(ctx, task); err != nil {
		var corrupt *CorruptRecordError
		if !errors.As(err, &corrupt) {
			return nil, err
		}
	}
	subject := l.subj.inboxAll(task)
	out := []eventlog.Envelope{}
	// The leader's last message on the wildcard bounds the read.
	last, _, err := l.leaderGet(ctx, msgGetRequest{LastFor: subject})
	if errors.Is(err, errNoMessage) {
		return out, nil
	}
	if err != nil {
		var corrupt *CorruptRecordError
		if !errors.As(err, &corrupt) {
			return nil, fmt.Errorf("jetstream: inbox of %s: %w", task, err)
		}
		last = &storedMsg{Sequence: corrupt.StreamSeq}
	}
	err = l.scan(ctx, subject, 1, last.Sequence, func(r record) { out = append(out, r.env) })
	return out, err
}

// LatestSnapshot implements eventlog.Reader: the tail names the newest
// baseline, so this is at most two leader reads.
func (l *Log) LatestSnapshot(ctx context.Context, task string) (eventlog.Envelope, error) {
	if err := l.check(ctx); err != nil {
		return eventlog.Envelope{}, err
	}
	if err := noeta.ValidateTaskID(task); err != nil {
		return eventlog.Envelope{}, fmt.Errorf("%w: %v", eventlog.ErrInvalidArgument, err)
	}
	t, err := l.readTail(ctx, task)
	if err != nil {
		return eventlog.Envelope{}, err
	}
	if t.baseline.seq == 0 {
		return eventlog.Envelope{}, fmt.Errorf("%w: no snapshot of task %s", eventlog.ErrNotFound, task)
	}
	return l.recordAt(ctx, t.baseline.streamSeq, t.baseline.seq)
}

// Subscribe implements eventlog.Subscriber.
func (l *Log) Subscribe(h eventlog.Handler) *eventlog.Subscription { return l.subs.Subscribe(h) }

// Tasks implements eventlog.TaskIndex: the stream's per-subject state lists
// the logs, and each log's tail gives its last seq and time.
func (l *Log) Tasks(ctx context.Context) ([]eventlog.TaskSummary, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	info, err := l.stream.Info(ctx, jetstream.WithSubjectFilter(l.subj.allLogs()))
	if err != nil {
		return nil, fmt.Errorf("jetstream: list tasks: %w", err)
	}
	out := make([]eventlog.TaskSummary, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		task, ok := l.subj.taskOfLog(subject)
		if !ok {
			continue
		}
		m, hdr, err := l.leaderGet(ctx, msgGetRequest{LastFor: subject})
		var r record
		switch {
		case errors.Is(err, errNoMessage):
			// The stream counts a message on the subject and cannot
			// load the last one (flipped bytes in its block): the
			// task's last record is lost, not the task.
			err = &CorruptRecordError{Subject: subject, Err: fmt.Errorf("the stream counts %d message(s) on the subject and cannot load the last one", info.State.Subjects[subject])}
		case err != nil:
			return nil, err
		default:
			var rs []record
			if rs, err = decodeMsg(m.Subject, m.Sequence, hdr, m.Data); err == nil {
				r = rs[len(rs)-1]
			}
		}
		if err != nil {
			l.corrupt.Add(1)
			if l.cfg.OnCorrupt == nil {
				return nil, err
			}
			l.cfg.OnCorrupt(err)
			continue
		}
		out = append(out, eventlog.TaskSummary{Task: task, LastSeq: r.env.Seq, LastTime: r.env.Time})
	}
	slices.SortFunc(out, func(a, b eventlog.TaskSummary) int {
		if c := b.LastTime.Compare(a.LastTime); c != 0 {
			return c
		}
		return cmp.Compare(a.Task, b.Task)
	})
	return out, nil
}
