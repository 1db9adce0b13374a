package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrStreamLoss is wrapped by CheckStream when the task stream's own
// counters say messages are gone.
var ErrStreamLoss = errors.New("jetstream: the task stream lost messages")

// StreamLossError reports what the task stream's state says is missing.
// The stream denies deletes and purges and has no limits, so every stream
// sequence from 1 to its last must be there: a later first sequence or a
// deleted sequence is a message the store lost (a truncated or emptied
// message block). The lost messages cannot name their tasks; a task whose
// log lost its end is found by comparing its log with its dispatcher row.
type StreamLossError struct {
	Stream string
	// First and Last are the stream's first and last sequence; Msgs is how
	// many messages it holds.
	First, Last, Msgs uint64
	// Deleted lists the interior sequences that are gone (at most the first
	// 100 of them).
	Deleted []uint64
}

func (e *StreamLossError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "jetstream: stream %s lost %d of its %d messages", e.Stream, e.Last-e.Msgs, e.Last)
	var parts []string
	if e.First > 1 {
		parts = append(parts, fmt.Sprintf("stream sequences 1-%d (its first sequence is %d)", e.First-1, e.First))
	}
	if len(e.Deleted) > 0 {
		parts = append(parts, "stream sequences "+seqRanges(e.Deleted))
	}
	if len(parts) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(parts, " and "))
	}
	return b.String()
}

// Unwrap lets errors.Is(err, ErrStreamLoss) hold.
func (e *StreamLossError) Unwrap() error { return ErrStreamLoss }

// seqRanges renders ascending sequences as "3-5, 9".
func seqRanges(seqs []uint64) string {
	var parts []string
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.FormatUint(seqs[i], 10))
		} else {
			parts = append(parts, strconv.FormatUint(seqs[i], 10)+"-"+strconv.FormatUint(seqs[j], 10))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// CheckStream asks the server for the task stream's state and returns a
// *StreamLossError if messages are missing from it, nil if none are.
func (l *Log) CheckStream(ctx context.Context) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	info, err := l.stream.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return fmt.Errorf("jetstream: stream %s: %w", l.streamName, err)
	}
	st := info.State
	if st.LastSeq == 0 || st.FirstSeq <= 1 && st.NumDeleted == 0 && st.Msgs == st.LastSeq {
		return nil
	}
	e := &StreamLossError{Stream: l.streamName, First: st.FirstSeq, Last: st.LastSeq, Msgs: st.Msgs}
	for _, s := range st.Deleted {
		if len(e.Deleted) == 100 {
			break
		}
		e.Deleted = append(e.Deleted, s)
	}
	return e
}

// CheckStream is Log.CheckStream.
func (r *Reader) CheckStream(ctx context.Context) error { return r.l.CheckStream(ctx) }
