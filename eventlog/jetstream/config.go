package jetstream

import (
	"fmt"
	"strings"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// Config configures a Log. Zero values take the defaults.
type Config struct {
	// Prefix is the first subject token and names the stream and buckets
	// (<PREFIX>_TASKS, <prefix>_idempotency, <prefix>_content). Default "noeta".
	Prefix string
	// Replicas of the stream and buckets: 1 on a single node, 3 on a cluster.
	Replicas int
	// Registry answers whether a lease is live (the dispatcher). Emit needs it.
	Registry eventlog.LeaseRegistry
	// Now stamps record times. Default time.Now.
	Now func() time.Time
	// RequestTimeout bounds each request to the server when ctx has no
	// deadline. Default 5s.
	RequestTimeout time.Duration
	// DuplicateWindow is the stream's Nats-Msg-Id window, which makes a
	// retried publish return the original. Idempotency keys do not depend on
	// it. Default 2m.
	DuplicateWindow time.Duration
	// OnCorrupt, when set, is told of every record a read cannot decode and
	// of every gap a Read finds in a log (an *eventlog.GapError), and the read
	// goes on without them. When nil, such a read fails with the
	// *CorruptRecordError or the *eventlog.GapError.
	OnCorrupt func(error)
	// Batch chooses how EmitBatch writes; BatchAuto (the default) is atomic
	// on a replicated stream and sequential on a single node (ADR 0038).
	// Atomic batches need the task stream's allow_atomic: Open creates a
	// replicated stream with it; under BatchAuto a stream without it is
	// written sequentially, under BatchAtomic Open turns it on (or fails).
	Batch BatchMode
	// TailCache is how many tasks' tails the Log keeps between appends
	// (the least recently written fall out and are read again from the
	// stream when next written). Default DefaultTailCache.
	TailCache int
	// GroupCommit, when above 0, writes the records of different tasks as
	// one atomic batch when this many wait at once (ADR 0107); a write goes
	// alone, without waiting, while at most a quarter of that many of the
	// Log's writes are in flight. It pays on a stream of one copy whose
	// server syncs every write (the embedded default sets
	// DefaultGroupCommit); elsewhere it costs more than it saves.
	// Open turns the stream's allow_atomic on, and refuses it on a
	// replicated stream. Default 0: every write alone.
	GroupCommit int
}

func (c Config) withDefaults() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = "noeta"
	}
	if err := noeta.ValidateToken("Config.Prefix", c.Prefix, 32); err != nil {
		return c, fmt.Errorf("jetstream: %w", err)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return c, fmt.Errorf("jetstream: Config.Replicas is %d, want 1 to 5", c.Replicas)
	}
	if !c.Batch.valid() {
		return c, fmt.Errorf("jetstream: Config.Batch is %d, want BatchAuto, BatchSequential or BatchAtomic", c.Batch)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RequestTimeout < 0 {
		return c, fmt.Errorf("jetstream: Config.RequestTimeout is negative")
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.DuplicateWindow < 0 {
		return c, fmt.Errorf("jetstream: Config.DuplicateWindow is negative")
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = 2 * time.Minute
	}
	if c.TailCache < 0 {
		return c, fmt.Errorf("jetstream: Config.TailCache is %d, want 0 (the default, %d) or more", c.TailCache, DefaultTailCache)
	}
	if c.GroupCommit < 0 {
		return c, fmt.Errorf("jetstream: Config.GroupCommit is %d, want 0 (off) or more", c.GroupCommit)
	}
	if c.TailCache == 0 {
		c.TailCache = DefaultTailCache
	}
	return c, nil
}

func (c Config) streamName() string {
	return strings.ToUpper(strings.ReplaceAll(c.Prefix, "-", "_")) + "_TASKS"
}
func (c Config) contentStreamName() string {
	return strings.ToUpper(strings.ReplaceAll(c.Prefix, "-", "_")) + "_CONTENT"
}
func (c Config) idemBucket() string    { return c.Prefix + "_idempotency" }
func (c Config) contentBucket() string { return c.Prefix + "_content" }
