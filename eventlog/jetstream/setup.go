package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrConfigMismatch: a stream or bucket exists with settings other than ours.
// A task stream is never reconfigured: limits there would drop records, so the
// operator decides. The one change made to an existing bucket is its read
// mode (see bucketReads), which loses nothing.
var ErrConfigMismatch = errors.New("jetstream: existing stream or bucket has a different configuration")

// ErrStreamLost: the task stream is gone but the buckets Open creates with
// it are there, so it existed and its history is lost (a removed stream
// directory, a deleted stream). Open refuses to create a fresh, empty one in
// its place: that would look like a store where nothing ever ran. It wraps
// ErrStreamMissing.
var ErrStreamLost = fmt.Errorf("%w: it existed (its buckets are there) and its history is lost", ErrStreamMissing)

// checkNotLost returns ErrStreamLost when the task stream of c does not
// exist while a bucket Open creates after it does. The buckets are the
// marker: Open creates the stream first, so a store with a bucket had a
// stream, on one node or a cluster alike, and no other file or key needs
// keeping in step.
func checkNotLost(ctx context.Context, js jetstream.JetStream, c Config) error {
	_, err := js.Stream(ctx, c.streamName())
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // there, or a failure the caller's own lookup reports
	}
	for _, witness := range []string{"KV_" + c.idemBucket(), "OBJ_" + c.contentBucket()} {
		_, err := js.Stream(ctx, witness)
		if err == nil {
			return fmt.Errorf("%w: task stream %s is missing while %s exists; restore the stream from a backup, or delete %s and %s to start an empty store on purpose",
				ErrStreamLost, c.streamName(), witness, "KV_"+c.idemBucket(), "OBJ_"+c.contentBucket())
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("jetstream: stream %s: %w", witness, err)
		}
	}
	return nil
}

// ContentStreamConfig is the content stream's definition (ADR 0111): one
// message a body, on a subject named by its sha256, and the server refuses
// a second message on a subject, so the first write of a body is the one
// kept. Messages may be deleted, as the object store's objects may. It is
// read from its leader, as the object store is: reads are rare (a fold
// from a snapshot, a spilled output), and one setting for every number of
// copies keeps a deployment's definition valid when its replicas change.
// deploy/nats holds the same.
func ContentStreamConfig(c Config) jetstream.StreamConfig {
	c, _ = c.withDefaults()
	return jetstream.StreamConfig{
		Name:                 c.contentStreamName(),
		Description:          "noeta content: bodies by sha256, one message each",
		Subjects:             []string{subjects{c.Prefix}.contentFilter()},
		Storage:              jetstream.FileStorage,
		Retention:            jetstream.LimitsPolicy,
		Replicas:             c.Replicas,
		MaxMsgs:              -1,
		MaxBytes:             -1,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
	}
}

// StreamConfig is the task stream's definition; deploy/nats holds the same.
func StreamConfig(c Config) jetstream.StreamConfig {
	c, _ = c.withDefaults()
	return jetstream.StreamConfig{
		Name:        c.streamName(),
		Description: "noeta task logs and inboxes",
		Subjects:    []string{subjects{c.Prefix}.streamFilter()},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    c.Replicas,
		DenyDelete:  true,
		DenyPurge:   true,
		AllowDirect: true,
		Duplicates:  c.DuplicateWindow,
		MaxMsgs:     -1,
		MaxBytes:    -1,
		MaxAge:      0,
		Discard:     jetstream.DiscardOld,
	}
}

// ensureStream creates want if it does not exist, and refuses an existing
// stream whose settings differ from want in anything the package relies on
// (streamDiffs). It serves the task stream and the dispatcher's streams.
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			s, err = js.Stream(ctx, want.Name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", want.Name, err)
	}
	if diffs := streamDiffs(s.CachedInfo().Config, want); len(diffs) > 0 {
		return nil, fmt.Errorf("%w: stream %s: %s", ErrConfigMismatch, want.Name, strings.Join(diffs, "; "))
	}
	return s, nil
}

// streamDiffs lists the settings in which have differs from want. Limits of 0
// and -1 both mean none; a zero duplicate window in want means the server's
// default and is not compared.
func streamDiffs(have, want jetstream.StreamConfig) []string {
	var diffs []string
	check := func(field string, ok bool, h, w any) {
		if !ok {
			diffs = append(diffs, fmt.Sprintf("%s is %v, want %v", field, h, w))
		}
	}
	unlimited := func(h, w int64) bool { return h == w || h <= 0 && w <= 0 }
	check("subjects", slices.Equal(have.Subjects, want.Subjects), have.Subjects, want.Subjects)
	check("storage", have.Storage == want.Storage, have.Storage, want.Storage)
	check("retention", have.Retention == want.Retention, have.Retention, want.Retention)
	check("replicas", have.Replicas == want.Replicas, have.Replicas, want.Replicas)
	check("deny_delete", have.DenyDelete == want.DenyDelete, have.DenyDelete, want.DenyDelete)
	check("deny_purge", have.DenyPurge == want.DenyPurge, have.DenyPurge, want.DenyPurge)
	check("allow_direct", have.AllowDirect == want.AllowDirect, have.AllowDirect, want.AllowDirect)
	check("max_age", have.MaxAge == want.MaxAge, have.MaxAge, want.MaxAge)
	check("max_msgs", unlimited(have.MaxMsgs, want.MaxMsgs), have.MaxMsgs, want.MaxMsgs)
	check("max_bytes", unlimited(have.MaxBytes, want.MaxBytes), have.MaxBytes, want.MaxBytes)
	check("max_msgs_per_subject", unlimited(have.MaxMsgsPerSubject, want.MaxMsgsPerSubject), have.MaxMsgsPerSubject, want.MaxMsgsPerSubject)
	check("discard", have.Discard == want.Discard, have.Discard, want.Discard)
	check("discard_new_per_subject", have.DiscardNewPerSubject == want.DiscardNewPerSubject, have.DiscardNewPerSubject, want.DiscardNewPerSubject)
	if want.Duplicates != 0 {
		check("duplicates", have.Duplicates == want.Duplicates, have.Duplicates, want.Duplicates)
	}
	check("allow_msg_schedules", have.AllowMsgSchedules == want.AllowMsgSchedules, have.AllowMsgSchedules, want.AllowMsgSchedules)
	check("allow_msg_ttl", have.AllowMsgTTL == want.AllowMsgTTL, have.AllowMsgTTL, want.AllowMsgTTL)
	// Both ways: a roll-up is a purge by whoever may publish, so a stream
	// that should refuse them (the wake ingress, the task logs) and allows
	// them is as wrong as the reverse.
	check("allow_rollup_hdrs", have.AllowRollup == want.AllowRollup, have.AllowRollup, want.AllowRollup)
	return diffs
}

func ensureKV(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return ensureKVMode(ctx, js, jetstream.DefaultPersistMode, want)
}

// ensureKVMode is ensureKV creating a missing bucket's stream with the
// persist mode given (nats.go's CreateKeyValue has no field for it).
func ensureKVMode(ctx context.Context, js jetstream.JetStream, mode jetstream.PersistModeType, want jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if mode == jetstream.DefaultPersistMode {
			kv, err = js.CreateKeyValue(ctx, want)
		} else {
			cfg := kvStreamConfig(want)
			cfg.PersistMode = mode
			if _, err = js.CreateStream(ctx, cfg); err == nil {
				kv, err = js.KeyValue(ctx, want.Bucket)
			}
		}
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, want.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: key-value bucket %s: %w", want.Bucket, err)
	}
	if kv, err = bucketReads(ctx, js, "KV_"+want.Bucket, want.Replicas, func() (jetstream.KeyValue, error) { return js.KeyValue(ctx, want.Bucket) }, kv); err != nil {
		return nil, fmt.Errorf("jetstream: key-value bucket %s: %w", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: key-value bucket %s: %w", want.Bucket, err)
	}
	if st.History() != int64(max(want.History, 1)) || st.TTL() != want.TTL {
		return nil, fmt.Errorf("%w: key-value bucket %s has history %d and ttl %v, want %d and %v",
			ErrConfigMismatch, want.Bucket, st.History(), st.TTL(), max(want.History, 1), want.TTL)
	}
	if info, ok := st.(*jetstream.KeyValueBucketStatus); ok && info.StreamInfo().Config.Replicas != want.Replicas {
		return nil, fmt.Errorf("%w: key-value bucket %s has %d replicas, want %d",
			ErrConfigMismatch, want.Bucket, info.StreamInfo().Config.Replicas, want.Replicas)
	}
	return kv, nil
}

// kvStreamConfig is the stream nats.go's CreateKeyValue makes for want
// (nats.go v1.55.0, prepareKeyValueConfig), for the settings noeta's
// buckets use: no mirror, sources, placement, republish or compression.
func kvStreamConfig(want jetstream.KeyValueConfig) jetstream.StreamConfig {
	dup := 2 * time.Minute
	if want.TTL > 0 && want.TTL < dup {
		dup = want.TTL
	}
	cfg := jetstream.StreamConfig{
		Name:              "KV_" + want.Bucket,
		Description:       want.Description,
		Subjects:          []string{"$KV." + want.Bucket + ".>"},
		MaxMsgsPerSubject: int64(max(want.History, 1)),
		MaxBytes:          -1,
		MaxAge:            want.TTL,
		MaxMsgSize:        -1,
		Storage:           want.Storage,
		Replicas:          max(want.Replicas, 1),
		AllowRollup:       true,
		DenyDelete:        true,
		Duplicates:        dup,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
		Metadata:          want.Metadata,
	}
	if want.MaxBytes != 0 {
		cfg.MaxBytes = want.MaxBytes
	}
	if want.MaxValueSize != 0 {
		cfg.MaxMsgSize = want.MaxValueSize
	}
	if want.LimitMarkerTTL != 0 {
		cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL = true, want.LimitMarkerTTL
	}
	return cfg
}

func ensureObjectStore(ctx context.Context, js jetstream.JetStream, want jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		obs, err = js.CreateObjectStore(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) || errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = js.ObjectStore(ctx, want.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: object store %s: %w", want.Bucket, err)
	}
	// Objects are read rarely (snapshots, large bodies): always from the
	// leader, so no role needs a second read right for them.
	if obs, err = bucketReads(ctx, js, "OBJ_"+want.Bucket, 0, func() (jetstream.ObjectStore, error) { return js.ObjectStore(ctx, want.Bucket) }, obs); err != nil {
		return nil, fmt.Errorf("jetstream: object store %s: %w", want.Bucket, err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("jetstream: object store %s: %w", want.Bucket, err)
	}
	if st.Replicas() != want.Replicas || st.Storage() != want.Storage {
		return nil, fmt.Errorf("%w: object store %s has %d replicas on %v, want %d on %v",
			ErrConfigMismatch, want.Bucket, st.Replicas(), st.Storage(), want.Replicas, want.Storage)
	}
	return obs, nil
}

// bucketReads sets how a bucket is read, and binds again after a change
// (ADR 0043). A replicated bucket is read from its leader (direct gets off):
// direct gets are answered by any replica, possibly before it has what the
// leader just acknowledged, and an idempotency entry, a row or a lease key
// written a moment ago would read as missing or old. A bucket of one copy
// (replicas 1) is read by direct gets: its one server is its leader, so a
// direct get sees every acknowledged write, and it costs the server and the
// client less than the API's JSON request (the registry reads two keys
// before every append). replicas 0 asks for leader reads whatever the
// copies. Every process decides from the bucket's replicas alone, so two
// processes never turn a bucket's mode back and forth. A bucket whose read mode cannot be turned to direct gets (a user without
// the right to update it) keeps leader reads, which are as correct.
func bucketReads[T any](ctx context.Context, js jetstream.JetStream, stream string, replicas int, bind func() (T, error), cur T) (T, error) {
	direct := replicas == 1
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return cur, err
	}
	cfg := s.CachedInfo().Config
	if cfg.AllowDirect == direct {
		return cur, nil
	}
	if direct && cfg.Replicas != 1 {
		// Replicated by its operator: the read the configuration asks
		// for is not one a replica can be trusted with.
		return cur, nil
	}
	cfg.AllowDirect = direct
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		if direct {
			return cur, nil
		}
		return cur, err
	}
	return bind()
}
