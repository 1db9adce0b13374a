package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/internal/backoff"
)

// The Feed: eventlog.Feed over the task stream.
//
// A consumer group is one durable pull consumer per partition,
// <group>-p<NN>, filtered on <prefix>.t.<p>.>, with MaxAckPending 1: the
// server hands a partition's records out one at a time, in stream order, to
// whichever process of the group pulls, and holds the next one back until the
// one out is acknowledged (or terminated). So order per task holds across any
// number of processes, and a process that dies hands its record to the others
// after AckWait. Every process of a group pulls every partition it takes;
// which one gets a record does not matter.
//
// The client decides what becomes of a failure: the consumer redelivers
// forever (MaxDeliver -1) and has no BackOff; a handler error is a
// NakWithDelay of the group's backoff (the record stays the one out, so the
// partition waits behind it), until the attempt that reaches MaxDeliver, which
// copies the record to <prefix>.dlq.<group> and terminates it. A record that
// does not decode is copied to <prefix>.quarantine.<group> and terminated at
// once. Both subjects are stored in <PREFIX>_DLQ. A copy is published (and
// acknowledged by the server) before the original is terminated; if the copy
// fails, the original is retried later instead, so nothing is dropped unseen.
// The copy's Nats-Msg-Id is the group and stream sequence, so a termination
// that got lost (the record is then handled and copied again) does not store
// a second copy within the stream's duplicate window.

// Headers of a dead-lettered or quarantined copy, beside the original's own
// (the original's Nats-* headers are left out: they would steer the copy's
// publish).
const (
	HeaderOriginalSubject   = "Noeta-Original-Subject"
	HeaderOriginalStreamSeq = "Noeta-Original-Stream-Seq"
	HeaderOriginalTime      = "Noeta-Original-Time" // when the stream stored it, RFC 3339
	HeaderGroup             = "Noeta-Group"
	HeaderError             = "Noeta-Error"
	HeaderAttempts          = "Noeta-Attempts" // dead letters: deliveries made
)

const (
	// feedRequestTimeout bounds an acknowledgement, a copy to the dead-letter
	// stream and a consumer's creation.
	feedRequestTimeout = 5 * time.Second
	// feedDrainGrace bounds how long a stopping puller waits for its
	// subscription to drain (one round trip to the server) before it lets
	// go.
	feedDrainGrace = 5 * time.Second
	// feedCreateConcurrency bounds the consumers created at once: creating
	// 64 replicated consumers together can outlast a request timeout.
	feedCreateConcurrency = 8
	// feedCreateWait bounds how long a group's consumers are retried
	// while the cluster answers that it is busy (feedCreateRetry at first,
	// doubling to feedCreateRetryMax): long enough for a meta leader's
	// election on a loaded cluster, short enough that a cluster without
	// JetStream, or a limit that stays, is reported rather than waited on.
	feedCreateWait     = 30 * time.Second
	feedCreateRetry    = 200 * time.Millisecond
	feedCreateRetryMax = 2 * time.Second
	// feedDuplicateWindow is the dead-letter stream's Nats-Msg-Id window.
	feedDuplicateWindow = 2 * time.Minute
	maxHeaderError      = 1024
)

// FeedOptions configures a Feed. Zero values take the defaults.
type FeedOptions struct {
	// Prefix is the prefix of the task stream the Feed reads (the Log's
	// Config.Prefix). Default "noeta".
	Prefix string
	// Replicas of the dead-letter stream <PREFIX>_DLQ: 1 on a single node, 3
	// on a cluster. Consumers take their stream's replicas.
	Replicas int
	// Logger receives what the Feed cannot return to a caller. Default
	// slog.Default().
	Logger *slog.Logger
	// OnQuarantine, when set, is told of every record quarantined, after its
	// copy is stored. It runs on the partition's puller: keep it short.
	OnQuarantine func(subject string, streamSeq uint64, err error)
}

func (o FeedOptions) withDefaults() (FeedOptions, error) {
	if o.Prefix == "" {
		o.Prefix = "noeta"
	}
	if err := noeta.ValidateToken("FeedOptions.Prefix", o.Prefix, 32); err != nil {
		return o, fmt.Errorf("jetstream: %w", err)
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		return o, fmt.Errorf("jetstream: FeedOptions.Replicas is %d, want 1 to 5", o.Replicas)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// FeedStats counts what a Feed did, over every Consume of it.
type FeedStats struct {
	// Delivered counts records handed to a handler.
	Delivered uint64
	// Acked counts records whose handler returned nil and whose
	// acknowledgement the server confirmed.
	Acked uint64
	// Redelivered counts deliveries with Attempt above 1 (in Delivered too).
	Redelivered uint64
	// Failed counts handler errors (and panics) answered with a redelivery:
	// after the backoff, or at once when the consumer was stopping.
	Failed uint64
	// DeadLettered counts records copied to the dead-letter subject after
	// their last attempt failed, and terminated.
	DeadLettered uint64
	// Quarantined counts records that did not decode, copied to the
	// quarantine subject and terminated without reaching a handler.
	Quarantined uint64
}

type feedCounters struct {
	delivered, acked, redelivered, failed, deadLettered, quarantined atomic.Uint64
}

// Feed is the JetStream eventlog.Feed: durable consumer groups over the
// partitions of one prefix's task stream. It is safe for concurrent use; one
// Feed may run several Consume calls (several groups, or one group twice).
type Feed struct {
	opts       FeedOptions
	nc         *nats.Conn
	js         jetstream.JetStream
	subj       subjects
	taskStream string
	log        *slog.Logger
	stats      feedCounters
}

var _ eventlog.Feed = (*Feed)(nil)

// OpenFeed returns the Feed of the task stream of cfg.Prefix on nc (which the
// caller owns and closes). The task stream must exist (Open creates it); the
// dead-letter stream <PREFIX>_DLQ is created if it does not exist, and one
// that exists with other settings is refused with ErrConfigMismatch.
func OpenFeed(ctx context.Context, nc *nats.Conn, cfg FeedOptions) (*Feed, error) {
	o, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	f := &Feed{
		opts:       o,
		nc:         nc,
		js:         js,
		subj:       subjects{o.Prefix},
		taskStream: Config{Prefix: o.Prefix}.streamName(),
		log:        o.Logger.With("component", "jetstream.Feed", "prefix", o.Prefix),
	}
	if _, err := js.Stream(ctx, f.taskStream); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("jetstream: feed: task stream %s does not exist (Open creates it): %w", f.taskStream, err)
		}
		return nil, fmt.Errorf("jetstream: feed: stream %s: %w", f.taskStream, err)
	}
	if _, err := ensureStream(ctx, js, DeadLetterStreamConfig(o.Prefix, o.Replicas)); err != nil {
		return nil, err
	}
	return f, nil
}

// DeadLetterSubject is where a group's records go after their last attempt
// failed: <prefix>.dlq.<group>.
func DeadLetterSubject(prefix, group string) string { return prefix + ".dlq." + group }

// QuarantineSubject is where a group's records that do not decode go:
// <prefix>.quarantine.<group>.
func QuarantineSubject(prefix, group string) string { return prefix + ".quarantine." + group }

// DeadLetterStreamConfig is the definition of the stream that stores the dead
// letters and quarantined records of every group of prefix: <PREFIX>_DLQ.
// Nothing expires: an operator reads, replays and deletes them.
func DeadLetterStreamConfig(prefix string, replicas int) jetstream.StreamConfig {
	if prefix == "" {
		prefix = "noeta"
	}
	if replicas == 0 {
		replicas = 1
	}
	return jetstream.StreamConfig{
		Name:        strings.ToUpper(strings.ReplaceAll(prefix, "-", "_")) + "_DLQ",
		Description: "noeta feed dead letters and quarantined records",
		Subjects:    []string{prefix + ".dlq.>", prefix + ".quarantine.>"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    replicas,
		Duplicates:  feedDuplicateWindow,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		Discard:     jetstream.DiscardOld,
	}
}

// FeedConsumerConfig is the durable consumer of group on partition: name
// <group>-p<NN>, filter <prefix>.t.<p>.>, every record from the start,
// explicit acks, one record out at a time, AckWait from fc (its default when
// zero), redelivered without limit and without server backoff (the Feed
// decides dead-lettering and backoff itself).
func FeedConsumerConfig(prefix, group string, partition int, fc eventlog.FeedConfig) jetstream.ConsumerConfig {
	if prefix == "" {
		prefix = "noeta"
	}
	fc = fc.WithDefaults()
	name := fmt.Sprintf("%s-p%02d", group, partition)
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   fmt.Sprintf("noeta feed: group %s, partition %d", group, partition),
		FilterSubject: prefix + ".t." + strconv.Itoa(partition) + ".>",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       fc.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 1,
	}
}

// Stats returns the Feed's counters.
func (f *Feed) Stats() FeedStats {
	return FeedStats{
		Delivered:    f.stats.delivered.Load(),
		Acked:        f.stats.acked.Load(),
		Redelivered:  f.stats.redelivered.Load(),
		Failed:       f.stats.failed.Load(),
		DeadLettered: f.stats.deadLettered.Load(),
		Quarantined:  f.stats.quarantined.Load(),
	}
}

// Consume implements eventlog.Feed: it creates (or updates) the group's
// consumer of every partition of cfg, pulls each on a goroutine of its own,
// and hands the records to h, one at a time per partition. When ctx ends it
// stops pulling, waits for the handler calls in flight and their
// acknowledgements, hands back (negatively acknowledges) any record that
// arrived too late to be handled, and returns nil. It returns an error when
// it cannot go on: cfg is invalid (eventlog.ErrInvalidArgument), a consumer
// cannot be created, or the connection is closed. A handler that runs longer
// than AckWait has its record delivered again, possibly to another process,
// while it still runs.
func (f *Feed) Consume(ctx context.Context, cfg eventlog.FeedConfig, h eventlog.FeedHandler) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("%w: nil FeedHandler", eventlog.ErrInvalidArgument)
	}
	fc := cfg.WithDefaults()
	parts := slices.Clone(fc.Partitions)
	slices.Sort(parts)
	parts = slices.Compact(parts)

	if len(parts) == 0 {
		<-ctx.Done() // nothing to consume
		return nil
	}
	if err := f.consumers(ctx, fc, parts); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	run, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, len(parts))
	for i, p := range parts {
		wg.Go(func() {
			if errs[i] = f.pull(run, fc, p, h); errs[i] != nil {
				stop() // the others stop too
			}
		})
	}
	wg.Wait()
	// Naks and terminations are fire-and-forget: see them out before the
	// caller may close the connection.
	if !f.nc.IsClosed() {
		_ = f.nc.FlushTimeout(feedRequestTimeout)
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// consumers creates or updates the group's consumer of each partition,
// all within one feedCreateWait: the first that fails for good stops the
// others, and a cluster that is busy is warned of once.
func (f *Feed) consumers(ctx context.Context, fc eventlog.FeedConfig, parts []int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.Now().Add(feedCreateWait)
	var warn sync.Once
	retrying := func(err error) {
		warn.Do(func() {
			f.log.Warn("feed consumers not created yet; retrying", "group", fc.Group, "partitions", len(parts), "err", err)
		})
	}
	var (
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, feedCreateConcurrency)
	var wg sync.WaitGroup
	for _, p := range parts {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if err := f.consumer(ctx, fc, p, deadline, retrying); err != nil && ctx.Err() == nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	return first
}

// consumer creates or updates one consumer (idempotent: every process of
// the group does it as it starts), retrying until deadline what a cluster
// answers while it places the consumer or elects a leader: no responders,
// a timeout, "temporarily unavailable" (retrying, if set, is told each
// time). A meta leader's election under load took longer than a handful
// of quick retries, and the group's Consume then ended at its start.
func (f *Feed) consumer(ctx context.Context, fc eventlog.FeedConfig, p int, deadline time.Time, retrying func(error)) error {
	cc := FeedConsumerConfig(f.opts.Prefix, fc.Group, p, fc)
	pause := backoff.New(feedCreateRetry, feedCreateRetryMax).Jittered()
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, feedRequestTimeout)
		_, err := f.js.CreateOrUpdateConsumer(cctx, f.taskStream, cc)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || f.nc.IsClosed() || !(transient(err) || clusterBusy(err)) || time.Now().After(deadline) {
			return fmt.Errorf("jetstream: feed consumer %s on %s (attempt %d): %w", cc.Durable, f.taskStream, attempt, err)
		}
		if retrying != nil {
			retrying(err)
		}
		if err := pause.Wait(ctx); err != nil {
			return err
		}
	}
}

// clusterBusy reports a JetStream API error a cluster answers while it is
// between leaders, has nodes down or is moving peers, which passes once
// they are back. (Insufficient resources can also mean a limit that stays;
// retried for a bounded time, it is then reported as it came.)
func clusterBusy(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10004, // incomplete results
		10005, // no suitable peers for placement
		10008, // JetStream system temporarily unavailable
		10023, // insufficient resources: the meta leader finds too few peers up to place it
		10009, // cluster can not handle the request (no leader)
		10202: // cluster member change in progress
		return true
	}
	return false
}

// Pulling. Each partition's puller has a subscription of its own and keeps
// at most one pull request (batch 1) out at a time: it asks for the next
// record only once it has answered the last, and while it waits the request
// sits at the server, which answers it the moment the record may go (so a
// record reaches an idle puller with no round trip of its own). It is the
// pull protocol by hand, not nats.go's Consume or Messages: those decide
// when to ask again from a count of what is out, which a race between their
// two goroutines can leave at "asked" when nothing is out, and the partition
// then stalls until the heartbeat check (twice the heartbeat, 30s by
// default); with batch 1, about one record in a few thousand did that here.
//
// A request ends with its record, with a status (408 expired, 409 the
// consumer's leader changed, ...), or silently: the connection moved to
// another server, or the server restarted. Idle heartbeats tell the last
// apart: no word for twice the heartbeat (or a reconnect) and the puller asks
// again. A spare request left at the server is harmless: it can only take
// the next record, which this puller would have asked for anyway.
//
// Stopping drains the subscription: the server stops answering once it sees
// the unsubscription, and what it sent before that still arrives; it is
// handed back at once (negatively acknowledged), for another process.

const (
	feedPullExpires   = 30 * time.Second
	feedPullHeartbeat = 5 * time.Second
	// feedWaitSlice is how often a waiting puller looks at its heartbeat
	// deadline and the connection's reconnects.
	feedWaitSlice = time.Second
	// feedPullPause is the wait after a request the server refused.
	feedPullPause = time.Second
	// feedPullBatch is how many records one pull request may take. The
	// consumer's MaxAckPending of 1 still hands them out one at a time, so
	// this is not a batch held by the process: it keeps a request waiting at
	// the server while a record is out, and the next record leaves the
	// moment the last one's ack lands, instead of a round trip later, when
	// a new request would have arrived. Asking again after every record put
	// two round trips between consecutive records of a partition, and at
	// 5,000 records/s on a loaded machine the feed fell behind (commit to
	// handler p50 0.5-0.9 s, BenchmarkFeedLatency).
	feedPullBatch = 256
)

type pullRequest struct {
	Batch     int           `json:"batch"`
	Expires   time.Duration `json:"expires"`
	Heartbeat time.Duration `json:"idle_heartbeat"`
}

var (
	pullRequestBody, _ = json.Marshal(pullRequest{Batch: feedPullBatch, Expires: feedPullExpires, Heartbeat: feedPullHeartbeat})
	errConsumerGone    = errors.New("jetstream: feed consumer deleted")
)

// pull consumes one partition until ctx ends (nil) or it cannot go on.
func (f *Feed) pull(ctx context.Context, fc eventlog.FeedConfig, p int, h eventlog.FeedHandler) error {
	for {
		err := f.pullOnce(ctx, fc, p, h)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if f.nc.IsClosed() {
			return fmt.Errorf("jetstream: feed %s partition %d: %w", fc.Group, p, nats.ErrConnectionClosed)
		}
		if !errors.Is(err, errConsumerGone) {
			return fmt.Errorf("jetstream: feed %s partition %d: %w", fc.Group, p, err)
		}
		// The consumer was deleted (by an operator, say), or nothing has
		// answered for a while: create it again (a no-op if it exists; a
		// new one starts from the beginning of the stream, as a new group
		// would) until that works or ctx ends.
		f.log.Warn("feed consumer deleted or not answering; creating it again", "group", fc.Group, "partition", p)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(feedPullPause):
			}
			err := f.consumer(ctx, fc, p, time.Now().Add(feedCreateWait), nil)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil
			}
			if f.nc.IsClosed() {
				return fmt.Errorf("jetstream: feed %s partition %d: %w", fc.Group, p, nats.ErrConnectionClosed)
			}
			f.log.Warn("feed consumer not created; trying again", "group", fc.Group, "partition", p, "err", err)
		}
	}
}

// pullOnce runs one subscription until ctx ends and it is drained (nil), or
// it cannot go on.
func (f *Feed) pullOnce(ctx context.Context, fc eventlog.FeedConfig, p int, h eventlog.FeedHandler) error {
	name := FeedConsumerConfig(f.opts.Prefix, fc.Group, p, fc).Durable
	next := "$JS.API.CONSUMER.MSG.NEXT." + f.taskStream + "." + name
	inbox := f.nc.NewInbox()
	sub, err := f.nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()

	var (
		out        bool      // a request is at the server
		left       int       // records the request at the server may still take
		heard      time.Time // when it last heard from the server
		notBefore  time.Time // no request before
		reconnects = f.nc.Stats().Reconnects
		drainUntil time.Time // set once stopping
		noReply    int       // requests answered "no responders" in a row
	)
	drainFailed := false
	var prog packProgress
	// stop drains the subscription once ctx has ended. A handler that
	// finished after that calls it before its acknowledgement: the request
	// still at the server (feedPullBatch) would otherwise take the next
	// record the moment the ack lands, only to hand it back, counting a
	// delivery that never reached a handler. The unsubscription goes first
	// on the connection, and the server gives nothing to a request nobody
	// listens to.
	stop := func() {
		if drainUntil.IsZero() && ctx.Err() != nil {
			drainUntil = time.Now().Add(feedDrainGrace)
			drainFailed = sub.Drain() != nil
		}
	}
	for {
		stop()
		if drainFailed {
			return nil
		}
		draining := !drainUntil.IsZero()
		if !draining && !out && !time.Now().Before(notBefore) {
			if err := f.nc.PublishRequest(next, inbox, pullRequestBody); err != nil {
				if f.nc.IsClosed() {
					return nats.ErrConnectionClosed
				}
				notBefore = time.Now().Add(feedPullPause)
			} else {
				out, heard, left = true, time.Now(), feedPullBatch
			}
		}

		var wctx context.Context
		var cancel context.CancelFunc
		switch {
		case draining:
			wctx, cancel = context.WithDeadline(context.Background(), drainUntil)
		case !out:
			wctx, cancel = context.WithDeadline(ctx, notBefore)
		default:
			wctx, cancel = context.WithTimeout(ctx, feedWaitSlice)
		}
		msg, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			switch {
			case draining:
				// Drained (the subscription closed), or out of time.
				return nil
			case ctx.Err() != nil:
				// Stop: drain on the next turn.
			case errors.Is(err, context.DeadlineExceeded):
				if r := f.nc.Stats().Reconnects; r != reconnects || time.Since(heard) > 2*feedPullHeartbeat {
					// The request went with the old connection, or the
					// server forgot it: ask again.
					reconnects, out = r, false
				}
			case f.nc.IsClosed() || errors.Is(err, nats.ErrConnectionClosed):
				return nats.ErrConnectionClosed
			case errors.Is(err, nats.ErrSlowConsumer):
				out = false
			case errors.Is(err, nats.ErrNoResponders):
				// nats.go hands a 503 status (nobody took the request: the
				// consumer has no leader yet, a cluster electing one, or it
				// is gone) to NextMsg as this error, not as a message: the
				// same as the status below.
				heard, out = time.Now(), false
				if noReply++; noReply%5 == 0 {
					return errConsumerGone
				}
				notBefore = time.Now().Add(feedPullPause)
			default:
				return err
			}
			continue
		}
		if !strings.HasPrefix(msg.Reply, "$JS.ACK.") {
			// A status of the request.
			heard = time.Now()
			code := msg.Header.Get("Status")
			if code != "503" {
				noReply = 0
			}
			switch code {
			case "100": // idle heartbeat
			case "404", "408": // no message, expired
				out = false
			case "503":
				// Nobody took the request: the consumer has no leader yet
				// (a cluster electing one), or it is gone. Now and then
				// create it again, which is a no-op if it exists.
				out = false
				if noReply++; noReply%5 == 0 && !draining {
					return errConsumerGone
				}
				notBefore = time.Now().Add(feedPullPause)
			case "409":
				out = false
				desc := msg.Header.Get("Description")
				switch {
				case strings.Contains(desc, "Consumer Deleted"):
					if !draining {
						return errConsumerGone
					}
				case strings.Contains(desc, "Leadership Change"):
				default:
					f.log.Debug("feed pull refused", "group", fc.Group, "partition", p, "status", code, "description", desc)
					notBefore = time.Now().Add(feedPullPause)
				}
			default:
				out = false
				f.log.Debug("feed pull refused", "group", fc.Group, "partition", p, "status", code, "description", msg.Header.Get("Description"))
				notBefore = time.Now().Add(feedPullPause)
			}
			continue
		}
		noReply = 0
		if left--; left <= 0 {
			out = false
		}
		if draining || ctx.Err() != nil {
			// Arrived as the puller stopped: hand it back now, for another
			// process of the group.
			f.reply(msg, ackNak)
			continue
		}
		f.handle(ctx, fc, p, msg, h, stop, &prog)
	}
}

// The acknowledgements, sent to a delivery's reply subject.
const (
	ackAck  = "+ACK"
	ackNak  = "-NAK"
	ackTerm = "+TERM"
)

// reply sends an acknowledgement and does not wait for the server: Consume
// flushes before it returns.
func (f *Feed) reply(m *nats.Msg, body string) { _ = f.nc.Publish(m.Reply, []byte(body)) }

func (f *Feed) nakWithDelay(m *nats.Msg, d time.Duration) {
	if d <= 0 {
		f.reply(m, ackNak)
		return
	}
	f.reply(m, fmt.Sprintf(`%s {"delay": %d}`, ackNak, d.Nanoseconds()))
}

func (f *Feed) term(m *nats.Msg, reason string) { f.reply(m, ackTerm+" "+reason) }

// packProgress is how far a partition got through the message it is on: a
// pack redelivered after one of its records failed starts after the records
// this process already handled (another process starts at its first, which
// Attempt > 1 tells the handler).
type packProgress struct {
	streamSeq uint64
	done      int // records handled (or dead-lettered)
	dead      int // of which dead-lettered
}

// handle decodes one message, has h handle its records in order and answers
// the server: an ack once every record is handled.
func (f *Feed) handle(ctx context.Context, fc eventlog.FeedConfig, p int, m *nats.Msg, h eventlog.FeedHandler, stop func(), prog *packProgress) {
	md, err := m.Metadata()
	if err != nil {
		f.quarantine(fc, m, nil, fmt.Errorf("jetstream: feed: message without metadata: %w", err))
		return
	}
	envs, err := f.decode(m.Subject, md.Sequence.Stream, m.Header, m.Data)
	if err != nil {
		f.quarantine(fc, m, md, err)
		return
	}
	if prog.streamSeq != md.Sequence.Stream {
		*prog = packProgress{streamSeq: md.Sequence.Stream}
	}
	attempt := int(min(md.NumDelivered, uint64(1<<31-1)))
	for prog.done < len(envs) {
		env := envs[prog.done]
		f.stats.delivered.Add(1)
		if attempt > 1 {
			f.stats.redelivered.Add(1)
		}
		err = callFeedHandler(ctx, h, eventlog.Delivery{Env: env, Partition: p, Attempt: attempt, Pending: md.NumPending})
		if ctx.Err() != nil {
			stop()
		}
		switch {
		case err == nil:
			prog.done++
			continue
		case ctx.Err() != nil:
			// Stopping: the error may be the stop itself. Hand the record back
			// now rather than after the backoff, and never dead-letter it for
			// this attempt.
			f.stats.failed.Add(1)
			f.reply(m, ackNak)
		case attempt >= fc.MaxDeliver && len(envs) == 1:
			f.deadLetter(fc, m, md, attempt, err)
		case attempt >= fc.MaxDeliver:
			// One record of a pack: it alone goes aside, the pack's others
			// are still handled.
			if f.deadLetterRecord(fc, m, md, env, attempt, err) {
				prog.done++
				prog.dead++
				continue
			}
			f.nakWithDelay(m, fc.BackoffFor(attempt))
		default:
			f.stats.failed.Add(1)
			f.log.Debug("feed handler failed; redelivering after the backoff", "group", fc.Group, "partition", p,
				"task", env.Task, "seq", env.Seq, "key", env.Key, "attempt", attempt, "err", err)
			f.nakWithDelay(m, fc.BackoffFor(attempt))
		}
		return
	}
	if f.ack(fc, m, md) {
		f.stats.acked.Add(uint64(len(envs) - prog.dead))
	}
}

func callFeedHandler(ctx context.Context, h eventlog.FeedHandler, d eventlog.Delivery) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("jetstream: feed handler panicked: %v", r)
		}
	}()
	return h(ctx, d)
}

// decode reads a delivered message as Read and Inbox do, and checks that
// each of its records belongs on its subject: a log record of its task with a
// seq, or an inbox record of its task under the subject's key.
func (f *Feed) decode(subject string, streamSeq uint64, hdr nats.Header, data []byte) ([]eventlog.Envelope, error) {
	rs, err := decodeMsg(subject, streamSeq, hdr, data)
	if err != nil {
		return nil, err
	}
	out := make([]eventlog.Envelope, len(rs))
	for i, r := range rs {
		if out[i], err = f.check(subject, streamSeq, r.env); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (f *Feed) check(subject string, streamSeq uint64, env eventlog.Envelope) (eventlog.Envelope, error) {
	bad := func(format string, args ...any) (eventlog.Envelope, error) {
		return eventlog.Envelope{}, &CorruptRecordError{Subject: subject, StreamSeq: streamSeq, Err: fmt.Errorf(format, args...)}
	}
	rest, ok := strings.CutPrefix(subject, f.subj.prefix+".t.")
	parts := strings.Split(rest, ".")
	switch {
	case !ok || len(parts) < 3:
		return bad("subject is not a task log or inbox")
	case parts[1] != env.Task:
		return bad("record of task %q on the subject of task %q", env.Task, parts[1])
	case len(parts) == 3 && parts[2] == "log":
		if env.Seq == 0 || env.Key != "" {
			return bad("log record without a seq, or with an inbox key")
		}
	case len(parts) == 4 && parts[2] == "in":
		if env.Key != parts[3] || env.Seq != 0 {
			return bad("inbox record with key %q (seq %d) on the subject of key %q", env.Key, env.Seq, parts[3])
		}
	default:
		return bad("subject is not a task log or inbox")
	}
	return env, nil
}

// ack acknowledges and waits for the server's confirmation, retrying a lost
// one (an ack of the same delivery is idempotent). An unconfirmed ack only
// means the record may come again.
func (f *Feed) ack(fc eventlog.FeedConfig, m *nats.Msg, md *nats.MsgMetadata) bool {
	var err error
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), feedRequestTimeout)
		_, err = f.nc.RequestWithContext(ctx, m.Reply, []byte(ackAck))
		cancel()
		if err == nil {
			return true
		}
		if f.nc.IsClosed() || !transient(err) {
			break
		}
	}
	f.log.Warn("feed acknowledgement unconfirmed; the record may be delivered again", "group", fc.Group,
		"subject", m.Subject, "stream_seq", md.Sequence.Stream, "err", err)
	return false
}

// deadLetter copies a record whose last attempt failed to the group's
// dead-letter subject and terminates it; if the copy fails, the record is
// retried after the backoff instead.
func (f *Feed) deadLetter(fc eventlog.FeedConfig, m *nats.Msg, md *nats.MsgMetadata, attempt int, cause error) {
	msg := f.aside(DeadLetterSubject(f.opts.Prefix, fc.Group), "dlq", fc.Group, m, md, cause)
	msg.Header.Set(HeaderAttempts, strconv.Itoa(attempt))
	if err := f.publishAside(msg); err != nil {
		f.stats.failed.Add(1)
		f.log.Error("feed dead letter not stored; retrying the record after the backoff", "group", fc.Group,
			"subject", m.Subject, "stream_seq", md.Sequence.Stream, "attempt", attempt, "err", err)
		f.nakWithDelay(m, fc.BackoffFor(attempt))
		return
	}
	f.stats.deadLettered.Add(1)
	f.log.Warn("feed record dead-lettered", "group", fc.Group, "subject", m.Subject,
		"stream_seq", md.Sequence.Stream, "attempts", attempt, "err", cause)
	f.term(m, "noeta: dead-lettered after "+strconv.Itoa(attempt)+" attempts")
}

// deadLetterRecord copies one record of a pack whose last attempt failed to
// the group's dead-letter subject, as a message of its own; false if the
// copy failed.
func (f *Feed) deadLetterRecord(fc eventlog.FeedConfig, m *nats.Msg, md *nats.MsgMetadata, env eventlog.Envelope, attempt int, cause error) bool {
	msg := f.aside(DeadLetterSubject(f.opts.Prefix, fc.Group), "dlq", fc.Group, m, md, cause)
	body, err := cloudEventBody(env)
	if err == nil {
		msg.Data = body
		msg.Header.Set("Content-Type", contentTypeCE)
		msg.Header.Set(hdrType, env.Type)
		msg.Header.Set(hdrOrigin, string(env.Origin))
		msg.Header.Set(hdrSeq, strconv.FormatUint(env.Seq, 10))
		msg.Header.Del(hdrCount)
		msg.Header.Set(nats.MsgIdHdr, msg.Header.Get(nats.MsgIdHdr)+":"+strconv.FormatUint(env.Seq, 10))
		msg.Header.Set(HeaderAttempts, strconv.Itoa(attempt))
		err = f.publishAside(msg)
	}
	if err != nil {
		f.stats.failed.Add(1)
		f.log.Error("feed dead letter not stored; retrying the record after the backoff", "group", fc.Group,
			"subject", m.Subject, "stream_seq", md.Sequence.Stream, "seq", env.Seq, "attempt", attempt, "err", err)
		return false
	}
	f.stats.deadLettered.Add(1)
	f.log.Warn("feed record dead-lettered", "group", fc.Group, "subject", m.Subject,
		"stream_seq", md.Sequence.Stream, "seq", env.Seq, "attempts", attempt, "err", cause)
	return true
}

// quarantine copies a record that does not decode to the group's
// quarantine subject and terminates it; if the copy fails, the record is
// retried after the backoff instead.
func (f *Feed) quarantine(fc eventlog.FeedConfig, m *nats.Msg, md *nats.MsgMetadata, cause error) {
	var seq uint64
	attempt := 1
	if md != nil {
		seq, attempt = md.Sequence.Stream, int(min(md.NumDelivered, uint64(1<<31-1)))
	}
	msg := f.aside(QuarantineSubject(f.opts.Prefix, fc.Group), "quarantine", fc.Group, m, md, cause)
	if err := f.publishAside(msg); err != nil {
		f.log.Error("feed quarantine copy not stored; retrying the record after the backoff", "group", fc.Group,
			"subject", m.Subject, "stream_seq", seq, "err", err)
		f.nakWithDelay(m, fc.BackoffFor(attempt))
		return
	}
	f.stats.quarantined.Add(1)
	f.log.Warn("feed record quarantined: it does not decode", "group", fc.Group, "subject", m.Subject,
		"stream_seq", seq, "err", cause)
	f.term(m, "noeta: quarantined")
	if f.opts.OnQuarantine != nil {
		f.opts.OnQuarantine(m.Subject, seq, cause)
	}
}

// aside builds the copy of m for subject: its data, its headers but the
// Nats-* ones, and where it came from and why.
func (f *Feed) aside(subject, kind, group string, m *nats.Msg, md *nats.MsgMetadata, cause error) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = m.Data
	for k, vs := range m.Header {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			continue
		}
		msg.Header[k] = slices.Clone(vs)
	}
	msg.Header.Set(HeaderOriginalSubject, m.Subject)
	msg.Header.Set(HeaderGroup, group)
	msg.Header.Set(HeaderError, headerValue(cause.Error()))
	if md != nil {
		seq := strconv.FormatUint(md.Sequence.Stream, 10)
		msg.Header.Set(HeaderOriginalStreamSeq, seq)
		msg.Header.Set(HeaderOriginalTime, md.Timestamp.UTC().Format(time.RFC3339Nano))
		msg.Header.Set(nats.MsgIdHdr, kind+":"+group+":"+seq)
	}
	return msg
}

func (f *Feed) publishAside(msg *nats.Msg) error {
	var err error
	for attempt := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), feedRequestTimeout)
		_, err = f.js.PublishMsg(ctx, msg, jetstream.WithRetryAttempts(2))
		cancel()
		if err == nil || f.nc.IsClosed() || !transient(err) {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	return err
}

// headerValue makes s fit a header: one line, bounded.
func headerValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxHeaderError {
		s = strings.ToValidUTF8(s[:maxHeaderError], "")
	}
	return s
}
