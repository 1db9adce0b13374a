package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Reader is the read side of a task stream, for a process whose NATS user may
// read the stream but not create or change anything in it: an observer worker
// (deploy/nats's observer role), an operator's inspection. It reads logs and
// inboxes, lists tasks, fetches content and makes the one write an observer is
// allowed, SystemEmit into an inbox. It cannot Create or Emit: write
// authority shows in the type.
//
// OpenReader only looks things up. The task stream must exist (an engine's
// Open creates it); the content store is looked up on the first Get, so a
// process that never fetches content needs no permission on it. It reads
// records with batched direct gets, never a consumer: a user that only reads
// needs no right to create, pull or delete consumers on the task stream
// (deploy/nats gives each observer group's user its own feed consumers
// alone).
type Reader struct {
	l *Log

	contentMu sync.Mutex // guards binding l.content and l.contentStream
}

var (
	_ eventlog.Reader    = (*Reader)(nil)
	_ eventlog.TaskIndex = (*Reader)(nil)
)

// ErrStreamMissing: a Reader found no task stream or content store to bind
// to. It creates neither: an engine's Open does.
var ErrStreamMissing = errors.New("jetstream: stream does not exist")

// OpenReader binds a Reader to the task stream of cfg.Prefix on nc (which the
// caller owns and closes). It sends no request that creates or updates
// anything: one stream lookup, whose settings must be the ones Open creates
// (ErrConfigMismatch otherwise; the replica count is not compared, since a
// reader does not define the stream). cfg.Registry is not used.
func OpenReader(ctx context.Context, nc *nats.Conn, cfg Config) (*Reader, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c.Registry = nil
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	l := &Log{cfg: c, nc: nc, js: js, streamName: c.streamName(), subj: subjects{c.Prefix}, direct: true}
	s, err := js.Stream(ctx, l.streamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if lerr := checkNotLost(ctx, js, c); lerr != nil {
			return nil, lerr
		}
		return nil, fmt.Errorf("%w: task stream %s (an engine's Open creates it): %w", ErrStreamMissing, l.streamName, err)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", l.streamName, err)
	}
	have := s.CachedInfo().Config
	want := StreamConfig(c)
	want.Replicas = have.Replicas
	if diffs := streamDiffs(have, want); len(diffs) > 0 {
		return nil, fmt.Errorf("%w: stream %s: %s", ErrConfigMismatch, l.streamName, strings.Join(diffs, "; "))
	}
	l.stream = s
	return &Reader{l: l}, nil
}

// Read implements eventlog.Reader (see Log.Read).
func (r *Reader) Read(ctx context.Context, task string, afterSeq uint64) ([]eventlog.Envelope, error) {
	return r.l.Read(ctx, task, afterSeq)
}

// Inbox implements eventlog.Reader (see Log.Inbox).
func (r *Reader) Inbox(ctx context.Context, task string) ([]eventlog.Envelope, error) {
	return r.l.Inbox(ctx, task)
}

// LatestSnapshot implements eventlog.Reader (see Log.LatestSnapshot).
func (r *Reader) LatestSnapshot(ctx context.Context, task string) (eventlog.Envelope, error) {
	return r.l.LatestSnapshot(ctx, task)
}

// Tasks implements eventlog.TaskIndex (see Log.Tasks).
func (r *Reader) Tasks(ctx context.Context) ([]eventlog.TaskSummary, error) {
	return r.l.Tasks(ctx)
}

// SystemEmit is eventlog.Writer's lease-free inbox write (see Log.SystemEmit):
// the one write an observer makes.
func (r *Reader) SystemEmit(ctx context.Context, task, key string, env eventlog.Envelope) (eventlog.Envelope, error) {
	return r.l.SystemEmit(ctx, task, key, env)
}

// Get is eventlog.ContentStore's Get (see Log.Get). The first call looks the
// content store up.
func (r *Reader) Get(ctx context.Context, ref noeta.ContentRef) ([]byte, error) {
	in, err := r.content(ctx)
	if err != nil {
		return nil, err
	}
	return r.l.get(ctx, ref, in)
}

// GetMany is eventlog.ContentStore's GetMany (see Log.GetMany).
func (r *Reader) GetMany(ctx context.Context, refs []noeta.ContentRef) (map[string][]byte, error) {
	in, err := r.content(ctx)
	if err != nil {
		return nil, err
	}
	return r.l.getMany(ctx, refs, in)
}

// content looks the content store up once it is first needed, and the
// content stream (ADR 0111) until it is found: it is made by an engine of
// this version, and on a store no such engine has opened every body is in
// the object store. A failure is returned, and the next call tries again.
func (r *Reader) content(ctx context.Context) (contentStores, error) {
	if err := r.l.check(ctx); err != nil {
		return contentStores{}, err
	}
	r.contentMu.Lock()
	defer r.contentMu.Unlock()
	if r.l.content == nil {
		bucket := r.l.cfg.contentBucket()
		obs, err := r.l.js.ObjectStore(ctx, bucket)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
			return contentStores{}, fmt.Errorf("%w: content store %s (an engine's Open creates it): %w", ErrStreamMissing, bucket, err)
		case err != nil:
			return contentStores{}, fmt.Errorf("jetstream: object store %s: %w", bucket, err)
		}
		r.l.content = obs
	}
	if r.l.contentStream == nil {
		name := r.l.cfg.contentStreamName()
		cs, err := r.l.js.Stream(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return contentStores{}, fmt.Errorf("jetstream: stream %s: %w", name, err)
		default:
			r.l.contentStream = cs
		}
	}
	return contentStores{r.l.content, r.l.contentStream}, nil
}

// CorruptRecords counts records reads skipped (with OnCorrupt set) or failed on.
func (r *Reader) CorruptRecords() uint64 { return r.l.CorruptRecords() }

// Close makes every later call return eventlog.ErrClosed. The connection is
// the caller's.
func (r *Reader) Close() error { return r.l.Close() }
