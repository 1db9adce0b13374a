package jetstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Put implements eventlog.ContentStore: the object is named by its sha256, and
// one that exists is not written again (first write wins).
func (l *Log) Put(ctx context.Context, body []byte, mediaType string) (noeta.ContentRef, error) {
	if err := l.check(ctx); err != nil {
		return noeta.ContentRef{}, err
	}
	ref := noeta.RefFor(body, mediaType)
	if _, err := l.content.GetInfo(ctx, ref.Hash); err == nil {
		return ref, nil
	} else if !errors.Is(err, jetstream.ErrObjectNotFound) {
		return noeta.ContentRef{}, fmt.Errorf("jetstream: content %s: %w", ref.Hash, err)
	}
	if _, err := l.content.PutBytes(ctx, ref.Hash, body); err != nil {
		return noeta.ContentRef{}, fmt.Errorf("jetstream: content %s: %w", ref.Hash, err)
	}
	return ref, nil
}

// Get implements eventlog.ContentStore.
func (l *Log) Get(ctx context.Context, ref noeta.ContentRef) ([]byte, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	if ref.Validate() != nil {
		return nil, fmt.Errorf("%w: content %q", eventlog.ErrNotFound, ref.Hash)
	}
	b, err := l.content.GetBytes(ctx, ref.Hash)
	// Put checks, then writes: two processes storing one body at once both
	// write it, and the second write removes the first one's chunks, which
	// a Get reading that first version then misses ("digests do not
	// match"). A body is named by its hash, so every complete version is the
	// same bytes: read again. A mismatch that stays is a damaged object.
	// The same race can also leave the reader waiting for chunks that were
	// removed until its read times out: any failure but "not found" is read
	// again, as many times.
	for i := 0; i < contentRereads && err != nil && !errors.Is(err, jetstream.ErrObjectNotFound); i++ {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		b, err = l.content.GetBytes(ctx, ref.Hash)
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: content %s", eventlog.ErrNotFound, ref.Hash)
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: content %s: %w", ref.Hash, err)
	}
	return b, nil
}

// contentRereads is how many times Get reads an object again after a
// failure other than not-found: a digest that did not match, or a read
// that lost its chunks, the marks of a concurrent rewrite of the same body.
const contentRereads = 3

// GetMany implements eventlog.ContentStore.
func (l *Log) GetMany(ctx context.Context, refs []noeta.ContentRef) (map[string][]byte, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(refs))
	for _, r := range refs {
		if _, ok := out[r.Hash]; ok {
			continue
		}
		b, err := l.Get(ctx, r)
		if errors.Is(err, eventlog.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[r.Hash] = b
	}
	return out, nil
}
