package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Put implements eventlog.ContentStore: a body is named by its sha256, and
// one that exists is not written again (first write wins). A body that fits
// a message is one message on the content stream, published on the
// condition that its subject holds none (ADR 0111): one write; a refusal
// is taken for the body only once the message there is read back and is
// it. A larger one goes to the object store.
func (l *Log) Put(ctx context.Context, body []byte, mediaType string) (noeta.ContentRef, error) {
	if err := l.check(ctx); err != nil {
		return noeta.ContentRef{}, err
	}
	ref := noeta.RefFor(body, mediaType)
	if l.contentStream != nil && int64(len(body))+contentMsgRoom <= l.nc.MaxPayload() {
		stored, err := l.putMessage(ctx, l.contentStream, ref.Hash, body)
		if err != nil {
			return noeta.ContentRef{}, err
		}
		if stored {
			return ref, nil
		}
		// The subject holds other bytes (written by hand, or damaged): the
		// body goes to the object store, which Get reads when the stream's
		// message is not the body.
	}
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

// contentMsgRoom is what a content message adds to its body: the subject
// and the compare-and-set header, well under this.
const contentMsgRoom = 512

// putMessage publishes body as the one message of its subject, on the
// condition that the subject holds none. A refused condition means the
// subject holds a message: stored reports whether that message is the
// body (its sha256 is the subject's), read back to be sure, never assumed.
func (l *Log) putMessage(ctx context.Context, cs jetstream.Stream, hash string, body []byte) (stored bool, err error) {
	pause := 200 * time.Microsecond
	for {
		pctx, cancel := l.withTimeout(ctx)
		_, err := l.js.PublishMsg(pctx, &nats.Msg{Subject: l.subj.content(hash), Data: body},
			jetstream.WithExpectLastSequencePerSubject(0))
		cancel()
		if err == nil {
			return true, nil
		}
		// Only the failed compare-and-set says the subject holds a message.
		// The stream's limit of one message a subject refuses with the
		// server's generic store failure (10077), which a full disk gives
		// too: an error. On a replicated stream a write of the same body in
		// flight (10164) is waited out, as the log's are.
		wrongLast, inFlight := conflict(err)
		if wrongLast {
			_, err := l.getMessage(ctx, cs, hash)
			switch {
			case err == nil:
				return true, nil
			case errors.Is(err, errDamagedBody):
				return false, nil
			case errors.Is(err, errNoMessage):
				// Deleted since the refusal: write it again, after the
				// pause below.
			default:
				return false, err
			}
		} else if !inFlight {
			return false, fmt.Errorf("jetstream: content %s: %w", hash, err)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, 20*time.Millisecond)
	}
}

// errDamagedBody: the content stream's message on a body's subject is not
// the body.
var errDamagedBody = errors.New("jetstream: the content stream's message is not the body its subject names")

// getMessage reads the body named hash from the content stream, from its
// leader. errNoMessage: it is not there; errDamagedBody: what is there is
// not the body.
func (l *Log) getMessage(ctx context.Context, cs jetstream.Stream, hash string) ([]byte, error) {
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	m, err := cs.GetLastMsgForSubject(ctx, l.subj.content(hash))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, errNoMessage
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: content %s: %w", hash, err)
	}
	// The subject names the body: a message that is not it was damaged or
	// written by hand, and is never handed out as the body.
	if sum := sha256.Sum256(m.Data); hex.EncodeToString(sum[:]) != hash {
		return nil, fmt.Errorf("%w: content %s, its sha256 is %x", errDamagedBody, hash, sum)
	}
	return m.Data, nil
}

// Get implements eventlog.ContentStore.
func (l *Log) Get(ctx context.Context, ref noeta.ContentRef) ([]byte, error) {
	return l.get(ctx, ref, contentStores{l.content, l.contentStream})
}

// contentStores are the two places a body may be: a Reader binds them on
// its first read and hands them to each read, so no read looks at a field
// another call may be setting.
type contentStores struct {
	objects jetstream.ObjectStore
	stream  jetstream.Stream // nil: no content stream (yet)
}

func (l *Log) get(ctx context.Context, ref noeta.ContentRef, in contentStores) ([]byte, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	if ref.Validate() != nil {
		return nil, fmt.Errorf("%w: content %q", eventlog.ErrNotFound, ref.Hash)
	}
	// The content stream first; the object store holds the bodies too large
	// for a message and those stored before the stream existed.
	var damaged error
	if cs := in.stream; cs != nil {
		b, err := l.getMessage(ctx, cs, ref.Hash)
		switch {
		case err == nil:
			return b, nil
		case errors.Is(err, errDamagedBody):
			// Put stores the body in the object store then: read it there,
			// and report the damage only if it is not.
			damaged = err
		case !errors.Is(err, errNoMessage):
			return nil, err
		}
	}
	b, err := in.objects.GetBytes(ctx, ref.Hash)
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
		b, err = in.objects.GetBytes(ctx, ref.Hash)
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		if damaged != nil {
			return nil, damaged
		}
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
	return l.getMany(ctx, refs, contentStores{l.content, l.contentStream})
}

func (l *Log) getMany(ctx context.Context, refs []noeta.ContentRef, in contentStores) (map[string][]byte, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(refs))
	for _, r := range refs {
		if _, ok := out[r.Hash]; ok {
			continue
		}
		b, err := l.get(ctx, r, in)
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
