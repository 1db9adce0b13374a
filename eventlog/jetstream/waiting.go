package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// ErrWaitingCut is wrapped by ListWaiting when the index holds more entries
// than WaitingConfig.ListMax: the entries read so far come with it.
var ErrWaitingCut = errors.New("jetstream: the waiting index holds more entries than one listing returns")

// Defaults of WaitingConfig.
const (
	DefaultWaitingListMax   = 100_000
	DefaultWaitingMarkerTTL = 24 * time.Hour
	// waitingListTimeout bounds a listing whose ctx has no deadline: a
	// watcher waits for every message the stream counted, and one the
	// server cannot load would keep it waiting.
	waitingListTimeout = 30 * time.Second
	// waitingDrainWait bounds the wait for a stopped watcher's channel to
	// close.
	waitingDrainWait = 5 * time.Second
)

// WaitingConfig configures a WaitingIndex. Zero values take the defaults.
type WaitingConfig struct {
	// Prefix names the bucket, <prefix>_waiting. Default "noeta".
	Prefix string
	// Replicas of the bucket, as the other buckets of the prefix.
	Replicas int
	// ListMax bounds the entries one ListWaiting returns. Default 100,000.
	ListMax int
	// MarkerTTL is how long the marker of a deleted entry stays in the
	// bucket: long enough for a watcher that lost its connection to see
	// the delete when it resumes, short enough that the bucket holds the
	// open requests and not every request ever made. Default 24h.
	MarkerTTL time.Duration
	// RequestTimeout bounds a put or delete whose ctx has no deadline.
	// Default 5s.
	RequestTimeout time.Duration
	// Logger is told of malformed entries and of watches that end.
	Logger *slog.Logger
}

func (c WaitingConfig) withDefaults() (WaitingConfig, error) {
	if c.Prefix == "" {
		c.Prefix = "noeta"
	}
	if err := noeta.ValidateToken("WaitingConfig.Prefix", c.Prefix, 32); err != nil {
		return c, fmt.Errorf("jetstream: %w", err)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return c, fmt.Errorf("jetstream: WaitingConfig.Replicas is %d, want 1 to 5", c.Replicas)
	}
	if c.ListMax < 0 || c.MarkerTTL < 0 || c.RequestTimeout < 0 {
		return c, fmt.Errorf("jetstream: WaitingConfig: ListMax, MarkerTTL and RequestTimeout may not be negative")
	}
	if c.MarkerTTL > 0 && c.MarkerTTL < time.Second {
		return c, fmt.Errorf("jetstream: WaitingConfig.MarkerTTL is %v, the server's least is 1s", c.MarkerTTL)
	}
	if c.ListMax == 0 {
		c.ListMax = DefaultWaitingListMax
	}
	if c.MarkerTTL == 0 {
		c.MarkerTTL = DefaultWaitingMarkerTTL
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// WaitingBucket is the name of the waiting index's bucket of prefix.
func WaitingBucket(prefix string) string { return prefix + "_waiting" }

// WaitingIndex is the eventlog.WaitingIndex on a JetStream key-value bucket,
// <prefix>_waiting: key <task>.<handle>, value the entry's JSON, history 1.
// A delete is a purge whose marker expires after MarkerTTL, so the bucket
// holds the open requests and recent deletes only. Its methods are safe for
// concurrent use.
type WaitingIndex struct {
	cfg      WaitingConfig
	kv       jetstream.KeyValue
	nc       *nats.Conn
	bucket   string
	log      *slog.Logger
	readOnly bool
	// replicated: the bucket has more than one copy, so a listing asks the
	// stream's leader where it must read up to (list). Taken from the
	// bucket when the index is opened or bound: an engine refuses a bucket
	// whose copies differ from its Replicas (ErrConfigMismatch), so a
	// bucket rescaled under running processes is one they are restarted on.
	replicated bool
	malformed  atomic.Uint64
}

var _ eventlog.WaitingIndex = (*WaitingIndex)(nil)

// OpenWaitingIndex creates the bucket if it does not exist (an engine's
// user may) and binds to it; an existing bucket with other settings is
// ErrConfigMismatch.
func OpenWaitingIndex(ctx context.Context, nc *nats.Conn, cfg WaitingConfig) (*WaitingIndex, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	bucket := WaitingBucket(c.Prefix)
	kv, err := ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:         bucket,
		Description:    "noeta: the requests a person must answer, by task and handle",
		History:        1,
		Replicas:       c.Replicas,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: c.MarkerTTL,
	})
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: key-value bucket %s: %w", bucket, err)
	}
	if st.LimitMarkerTTL() != c.MarkerTTL {
		return nil, fmt.Errorf("%w: key-value bucket %s keeps delete markers %v, want %v",
			ErrConfigMismatch, bucket, st.LimitMarkerTTL(), c.MarkerTTL)
	}
	return newWaitingIndex(c, nc, kv, st, false), nil
}

func newWaitingIndex(c WaitingConfig, nc *nats.Conn, kv jetstream.KeyValue, st jetstream.KeyValueStatus, readOnly bool) *WaitingIndex {
	bucket := WaitingBucket(c.Prefix)
	x := &WaitingIndex{cfg: c, kv: kv, nc: nc, bucket: bucket, readOnly: readOnly,
		log: c.Logger.With("component", "jetstream.WaitingIndex", "bucket", bucket)}
	// A status that does not say how many copies is taken as replicated:
	// the bound then costs a request, its absence could cost an entry.
	x.replicated = true
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		x.replicated = bs.StreamInfo().Config.Replicas > 1
	}
	return x
}

// BindWaitingIndex binds to the bucket of cfg.Prefix without creating or
// changing it, for a process whose NATS user may only read (deploy/nats's
// operator role); its PutWaiting and DeleteWaiting fail. A missing bucket
// wraps ErrStreamMissing.
func BindWaitingIndex(ctx context.Context, nc *nats.Conn, cfg WaitingConfig) (*WaitingIndex, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	bucket := WaitingBucket(c.Prefix)
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: bucket %s (an engine creates it): %w", ErrStreamMissing, bucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: key-value bucket %s: %w", bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: key-value bucket %s: %w", bucket, err)
	}
	return newWaitingIndex(c, nc, kv, st, true), nil
}

// Malformed is how many malformed entries reads have skipped.
func (x *WaitingIndex) Malformed() uint64 { return x.malformed.Load() }

func (x *WaitingIndex) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, x.cfg.RequestTimeout)
}

func waitingKey(task, handle string) string { return task + "." + handle }

// PutWaiting stores w as eventlog.EncodeWaiting shapes it.
func (x *WaitingIndex) PutWaiting(ctx context.Context, w eventlog.Waiting) error {
	if x.readOnly {
		return fmt.Errorf("jetstream: the waiting index was bound read-only")
	}
	w, b, err := eventlog.EncodeWaiting(w)
	if err != nil {
		return err
	}
	ctx, cancel := x.reqCtx(ctx)
	defer cancel()
	if _, err := x.kv.Put(ctx, waitingKey(w.Task, w.Handle), b); err != nil {
		return fmt.Errorf("jetstream: put waiting entry %s.%s: %w", w.Task, w.Handle, err)
	}
	return nil
}

// DeleteWaiting removes the entry of task and handle; a missing one is no
// error.
func (x *WaitingIndex) DeleteWaiting(ctx context.Context, task, handle string) error {
	if x.readOnly {
		return fmt.Errorf("jetstream: the waiting index was bound read-only")
	}
	if err := eventlog.ValidWaitingKey(task, handle); err != nil {
		return err
	}
	ctx, cancel := x.reqCtx(ctx)
	defer cancel()
	if err := x.kv.Purge(ctx, waitingKey(task, handle), jetstream.PurgeTTL(x.cfg.MarkerTTL)); err != nil {
		return fmt.Errorf("jetstream: delete waiting entry %s.%s: %w", task, handle, err)
	}
	return nil
}

// ListWaiting returns every entry, oldest request first, from one watch
// of the last value of each key up to the end of the initial values: one
// consumer, no read per key. Malformed entries are skipped and counted.
// Past ListMax entries it returns those read with ErrWaitingCut.
func (x *WaitingIndex) ListWaiting(ctx context.Context) ([]eventlog.Waiting, error) {
	return x.list(ctx, ">")
}

// ListTaskWaiting returns the entries of task, oldest first, from a watch
// of its keys alone: the engine reconciles a task's entries on every
// segment, which must not cost with the fleet.
func (x *WaitingIndex) ListTaskWaiting(ctx context.Context, task string) ([]eventlog.Waiting, error) {
	if err := noeta.ValidateTaskID(task); err != nil {
		return nil, fmt.Errorf("jetstream: waiting entries: %w", err)
	}
	return x.list(ctx, task+".*")
}

func (x *WaitingIndex) list(ctx context.Context, keys string) ([]eventlog.Waiting, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, waitingListTimeout)
		defer cancel()
	}
	// The watch's consumer is an R1 consumer the cluster places on any
	// replica of the bucket, one that may not have applied the latest
	// acknowledged writes yet: on its own, a listing right after a put or
	// a delete could miss it (the engine would then think an approval
	// request is not there). On a replicated bucket the listing first asks
	// the stream's leader for the last message among its keys and reads
	// until the watch has delivered it: every write acknowledged before
	// the listing started, deletes included (a delete is a message on its
	// key). A bucket of one copy needs no bound: its one server is its
	// leader and holds the consumer, whose initial values include every
	// acknowledged write. A failed look-up fails the listing, never an
	// unbounded one that could miss an entry.
	var upTo uint64
	if x.replicated {
		var err error
		if upTo, err = x.leaderLastSeq(ctx, keys); err != nil {
			return nil, fmt.Errorf("jetstream: list the waiting index: %w", err)
		}
	}
	w, err := x.kv.Watch(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("jetstream: list the waiting index: %w", err)
	}
	defer stopWatcher(w)
	var (
		byKey   = map[string]eventlog.Waiting{}
		bad     int
		seen    uint64
		initial bool
	)
	defer func() {
		if bad > 0 {
			x.log.Warn("the waiting index holds malformed entries; they are skipped", "count", bad)
		}
	}()
	done := func() []eventlog.Waiting {
		out := make([]eventlog.Waiting, 0, len(byKey))
		for _, e := range byKey {
			out = append(out, e)
		}
		eventlog.SortWaiting(out)
		return out
	}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("jetstream: list the waiting index (%d entries read): %w", len(byKey), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("jetstream: list the waiting index: the watch ended (connection closed)")
			}
			if e == nil {
				initial = true
			} else {
				seen = max(seen, e.Revision())
				switch e.Operation() {
				case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
					delete(byKey, e.Key())
				default:
					entry, err := x.decode(e)
					if err != nil {
						bad++
						delete(byKey, e.Key())
						break
					}
					if _, ok := byKey[e.Key()]; !ok && len(byKey) == x.cfg.ListMax {
						return done(), fmt.Errorf("%w: %d returned; more wait", ErrWaitingCut, len(byKey))
					}
					byKey[e.Key()] = entry
				}
			}
			if initial && seen >= upTo {
				return done(), nil
			}
		}
	}
}

// leaderLastSeq asks the bucket stream's leader (a JetStream API get, which
// only the leader answers, unlike a direct get) for the sequence of the last
// message among keys: 0 when there is none. The message there now is one
// the watch will deliver, or a later one of the same keys (history 1); one
// that leaves the stream before the watch delivers it (a delete marker
// whose MarkerTTL ends in between) makes the listing wait for its timeout
// and fail, not return without it.
func (x *WaitingIndex) leaderLastSeq(ctx context.Context, keys string) (uint64, error) {
	stream := "KV_" + x.bucket
	body, err := json.Marshal(waitingLastRequest{LastFor: "$KV." + x.bucket + "." + keys, NoHeaders: true})
	if err != nil {
		return 0, err
	}
	resp, err := x.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return 0, fmt.Errorf("leader get on %s: %w", stream, err)
	}
	var r msgGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return 0, fmt.Errorf("leader get on %s: bad response: %w", stream, err)
	}
	if r.Error != nil {
		if r.Error.ErrCode == 10037 { // no message; 10059 (no stream) is an error
			return 0, nil
		}
		return 0, fmt.Errorf("leader get on %s: %s (code %d)", stream, r.Error.Description, r.Error.ErrCode)
	}
	if r.Message == nil || r.Message.Sequence == 0 {
		return 0, fmt.Errorf("leader get on %s: an answer without a message or an error", stream)
	}
	return r.Message.Sequence, nil
}

type waitingLastRequest struct {
	LastFor   string `json:"last_by_subj"`
	NoHeaders bool   `json:"no_hdr,omitempty"`
}

// decode reads a put entry; a malformed one is counted.
func (x *WaitingIndex) decode(e jetstream.KeyValueEntry) (eventlog.Waiting, error) {
	task, handle, ok := strings.Cut(e.Key(), ".")
	var (
		w   eventlog.Waiting
		err error
	)
	if !ok {
		err = fmt.Errorf("key %q is not <task>.<handle>", e.Key())
	} else {
		w, err = eventlog.DecodeWaiting(task, handle, e.Value())
	}
	if err != nil {
		x.malformed.Add(1)
		x.log.Debug("skipped a malformed waiting entry", "key", e.Key(), "revision", e.Revision(), "err", err)
	}
	return w, err
}

// WatchWaiting calls fn with the entries present now, the marker, then each
// change, on a goroutine of its own that stop (or the end of ctx) ends;
// stop returns once fn is no longer called and must not be called from fn.
// Reconnects are the key-value watcher's: its ordered consumer resumes
// after the last change it delivered. If the connection closes, the watch
// ends (logged).
func (x *WaitingIndex) WatchWaiting(ctx context.Context, fn func(eventlog.WaitingChange)) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := x.kv.WatchAll(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("jetstream: watch the waiting index: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer stopWatcher(w)
		initial := true
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					x.log.Warn("the watch of the waiting index ended: the connection closed")
					return
				}
				if ctx.Err() != nil {
					return
				}
				if e == nil {
					initial = false
					fn(eventlog.WaitingChange{})
					continue
				}
				if e.Operation() != jetstream.KeyValuePut {
					task, handle, ok := strings.Cut(e.Key(), ".")
					if !initial && ok {
						fn(eventlog.WaitingChange{Deleted: true, Entry: eventlog.Waiting{Task: task, Handle: handle}})
					}
					continue
				}
				entry, err := x.decode(e)
				if err != nil {
					continue
				}
				fn(eventlog.WaitingChange{Entry: entry})
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}, nil
}

// stopWatcher unsubscribes w and drains its channel until it closes: the
// watcher's message handler blocks on a full channel, and a handler blocked
// there never lets the subscription finish closing.
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop()
	t := time.NewTimer(waitingDrainWait)
	defer t.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-t.C:
			return
		}
	}
}
