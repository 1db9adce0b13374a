package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// directBatch is how many records one batched direct get asks for.
const directBatch = 500

// directScan is scan without a consumer: batched direct gets
// ($JS.API.DIRECT.GET.<stream>, next_by_subj), which any replica answers.
// A Reader reads so: the users that only read (deploy/nats's observer and
// approver roles) then need no right to create, pull or delete consumers on
// the task stream, where each observer group's durable feed consumers are
// its alone. A replica that lags behind end is asked again, never taken
// for the end of the log.
func (l *Log) directScan(ctx context.Context, subject string, start, end uint64, fn func(record)) error {
	var stalled time.Time
	pause := 5 * time.Millisecond
	for start <= end {
		next, err := l.directBatch(ctx, subject, start, end, fn)
		if err != nil && !transient(err) {
			return err
		}
		progressed := next > start
		start = next
		if progressed {
			stalled, pause = time.Time{}, 5*time.Millisecond
			if err == nil {
				continue
			}
		}
		// Nothing at or after start on the replica that answered, though
		// the leader had records up to end (it lags), or no answer while
		// the stream moves (no responders, a timeout): ask again, from
		// where the last batch stopped.
		if stalled.IsZero() {
			stalled = time.Now()
		} else if time.Since(stalled) > l.cfg.RequestTimeout {
			if err == nil {
				err = nats.ErrTimeout
			}
			return fmt.Errorf("jetstream: read %s: no replica served stream sequences %d to %d within %v: %w", subject, start, end, l.cfg.RequestTimeout, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
	return nil
}

// directBatch asks for up to directBatch records of subject from stream
// sequence start, delivers those up to end, and returns the sequence to go
// on from (start when nothing came).
func (l *Log) directBatch(ctx context.Context, subject string, start, end uint64, fn func(record)) (uint64, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}{start, subject, directBatch})
	if err != nil {
		return start, err
	}
	inbox := l.nc.NewRespInbox()
	// A channel of its own, sized to the batch and its end: SubscribeSync
	// allocates one of the connection's default length (65,536 messages,
	// half a megabyte zeroed) for every read. The server sends at most
	// directBatch records and one status, so the channel never fills.
	msgs := make(chan *nats.Msg, directBatch+1)
	sub, err := l.nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return start, fmt.Errorf("jetstream: read %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := l.nc.PublishRequest("$JS.API.DIRECT.GET."+l.streamName, inbox, req); err != nil {
		return start, fmt.Errorf("jetstream: read %s: %w", subject, err)
	}
	// Each answer is waited for at most RequestTimeout.
	wait := time.NewTimer(l.cfg.RequestTimeout)
	defer wait.Stop()
	for {
		var m *nats.Msg
		select {
		case m = <-msgs:
		case <-ctx.Done():
			return start, ctx.Err()
		case <-wait.C:
			return start, fmt.Errorf("jetstream: read %s: %w: no direct get answer within %v", subject, nats.ErrTimeout, l.cfg.RequestTimeout)
		}
		wait.Reset(l.cfg.RequestTimeout)
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			switch status := m.Header.Get("Status"); status {
			case "204", "404": // the end of the batch; nothing (more) there
				return start, nil
			case "503":
				return start, fmt.Errorf("jetstream: read %s: %w", subject, nats.ErrNoResponders)
			default:
				return start, fmt.Errorf("jetstream: read %s: direct get answered %s %s", subject, status, m.Header.Get("Description"))
			}
		}
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return start, fmt.Errorf("jetstream: read %s: a direct get answer without its sequence: %w", subject, err)
		}
		if seq > end {
			return end + 1, nil
		}
		start = seq + 1
		rs, err := decodeMsg(m.Header.Get("Nats-Subject"), seq, m.Header, m.Data)
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
		if seq == end {
			return start, nil
		}
	}
}
