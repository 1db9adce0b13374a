package jetstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RatesBucket is the name of the rate limits' bucket under prefix.
func RatesBucket(prefix string) string { return prefix + "_rates" }

// Bounds of the rate counts (docs/adr/0093).
const (
	// RatesMaxTTL is the longest a count is kept after a take: the longest
	// window (guards.MaxRateWindow, 24h) and the slack for clocks behind.
	// It is also the bucket's max age, a backstop for an entry written
	// without a TTL of its own.
	RatesMaxTTL = 25 * time.Hour
	// ratesMarkerTTL is how long the marker of an expired count stays.
	// The bucket needs one for per-entry TTLs; nothing reads them.
	ratesMarkerTTL = time.Minute
	// ratesTries bounds the compare-and-set rounds of one take: a count
	// that keeps changing under it is an error, and the guard denies.
	ratesTries = 16
	// maxRateValue bounds a count's value as read.
	maxRateValue = 20
)

// RatesBucketConfig is the rate limits' bucket: one key per limit,
// principal (or agent) and window, the count in decimal, each entry with
// a TTL of its own.
func RatesBucketConfig(prefix string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         RatesBucket(prefix),
		Description:    "noeta: the rate limits' counts, by agent, limit, principal and window",
		History:        1,
		TTL:            RatesMaxTTL,
		Replicas:       replicas,
		Storage:        jetstream.FileStorage,
		LimitMarkerTTL: ratesMarkerTTL,
	}
}

// Rates counts calls per fixed window for the rate limit guard
// (guards.RateCounter) in the deployment's bucket <prefix>_rates, so that
// every host and gateway on the cluster counts against one number. A take
// reads the count and writes count+1 with a compare-and-set on the entry's
// revision (a create when there is none), retrying a conflict a bounded
// number of times; each write sets the entry's TTL. Safe for concurrent
// use.
type Rates struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	subj   string // $KV.<bucket>.
	bucket string
}

// OpenRates opens (creating it if missing) the rate limits' bucket of the
// deployment prefix on nc.
func OpenRates(ctx context.Context, nc *nats.Conn, prefix string, replicas int) (*Rates, error) {
	if replicas < 1 {
		replicas = 1
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	want := RatesBucketConfig(prefix, replicas)
	kv, err := ensureKV(ctx, js, want)
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: key-value bucket %s: %w", want.Bucket, err)
	}
	if info, ok := st.(*jetstream.KeyValueBucketStatus); ok && !info.StreamInfo().Config.AllowMsgTTL {
		return nil, fmt.Errorf("%w: key-value bucket %s does not allow per-entry TTLs (made without limit_marker_ttl); delete it and let the engine make it",
			ErrConfigMismatch, want.Bucket)
	}
	return &Rates{js: js, kv: kv, subj: "$KV." + want.Bucket + ".", bucket: want.Bucket}, nil
}

// Take counts one call under key if fewer than limit are counted there
// (guards.RateCounter). The entry is kept ttl after this write (rounded up
// to whole seconds, at most RatesMaxTTL).
func (r *Rates) Take(ctx context.Context, key string, limit int64, ttl time.Duration) (int64, bool, error) {
	if limit < 1 {
		return 0, false, fmt.Errorf("jetstream: rates: limit %d", limit)
	}
	if ttl > RatesMaxTTL {
		return 0, false, fmt.Errorf("jetstream: rates: a TTL of %v is over the bucket's %v", ttl, RatesMaxTTL)
	}
	ttl = max(time.Second, (ttl + time.Second - 1).Truncate(time.Second))
	for try := range ratesTries {
		if try > 0 {
			// Jittered, growing: racing hosts spread out.
			pause := time.Duration(rand.Int64N(int64(200*time.Microsecond) << min(try, 6)))
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, false, r.fail(key, ctx.Err())
			case <-t.C:
			}
		}
		e, err := r.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			_, err := r.kv.Create(ctx, key, []byte("1"), jetstream.KeyTTL(ttl))
			if err == nil {
				return 1, true, nil
			}
			if errors.Is(err, jetstream.ErrKeyExists) || casConflict(err) {
				continue // another host counted first
			}
			return 0, false, r.fail(key, err)
		}
		if err != nil {
			return 0, false, r.fail(key, err)
		}
		v := e.Value()
		if len(v) > maxRateValue {
			return 0, false, r.fail(key, fmt.Errorf("the count is %d bytes", len(v)))
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 {
			return 0, false, r.fail(key, fmt.Errorf("the count %q is not a count", v))
		}
		if n >= limit {
			return n, false, nil
		}
		// kv.Update cannot set a TTL: the same compare-and-set, published
		// with one.
		msg := &nats.Msg{Subject: r.subj + key, Data: strconv.AppendInt(nil, n+1, 10)}
		_, err = r.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(e.Revision()), jetstream.WithMsgTTL(ttl))
		if err == nil {
			return n + 1, true, nil
		}
		if casConflict(err) {
			continue
		}
		return 0, false, r.fail(key, err)
	}
	return 0, false, r.fail(key, fmt.Errorf("the count changed under each of %d tries", ratesTries))
}

// casConflict reports a failed compare-and-set, or a sibling write still in
// flight on a replicated bucket: both are tried again.
func casConflict(err error) bool {
	wrong, inFlight := conflict(err)
	return wrong || inFlight
}

func (r *Rates) fail(key string, err error) error {
	return fmt.Errorf("rate count %s in bucket %s: %w", key, r.bucket, err)
}
