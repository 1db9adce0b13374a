package eventlog

import (
	"context"
	"fmt"
	"time"

	"github.com/noeta-go/noeta"
)

// Defaults of [FeedConfig].
const (
	DefaultMaxDeliver = 5
	DefaultAckWait    = 30 * time.Second
)

// DefaultBackoff is the wait before each redelivery of a record a handler
// failed, when a FeedConfig gives none; the last entry repeats.
var DefaultBackoff = []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second}

// FeedConfig names a consumer group and what it consumes.
type FeedConfig struct {
	// Group names the durable consumer group (a token). Every process that
	// consumes with the same Group shares its records: each record goes to
	// one of them.
	Group string
	// Partitions is the partitions (0 to 63, see noeta.Partition) this
	// consumer takes; nil means all. Processes of one group may take
	// overlapping ranges: a partition is still delivered one record at a
	// time, in order.
	Partitions []int
	// MaxDeliver is how many times a record is delivered before it is given
	// up on and dead-lettered (DefaultMaxDeliver).
	MaxDeliver int
	// Backoff is the wait before each redelivery after a failure
	// (DefaultBackoff); the last entry repeats.
	Backoff []time.Duration
	// AckWait is how long a delivery may stay unanswered before the record
	// is delivered again, to this or another process (DefaultAckWait). It is
	// what hands the records of a process that died to the others.
	AckWait time.Duration
}

// Validate reports the first invalid field, by name.
func (c FeedConfig) Validate() error {
	if err := noeta.ValidateToken("FeedConfig.Group", c.Group, 64); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	for i, p := range c.Partitions {
		if p < 0 || p >= noeta.Partitions {
			return fmt.Errorf("%w: FeedConfig.Partitions[%d] is %d, want 0 to %d", ErrInvalidArgument, i, p, noeta.Partitions-1)
		}
	}
	if c.MaxDeliver < 0 || c.AckWait < 0 {
		return fmt.Errorf("%w: FeedConfig.MaxDeliver and AckWait must not be negative", ErrInvalidArgument)
	}
	for i, d := range c.Backoff {
		if d < 0 {
			return fmt.Errorf("%w: FeedConfig.Backoff[%d] is negative", ErrInvalidArgument, i)
		}
	}
	return nil
}

// WithDefaults fills the zero fields.
func (c FeedConfig) WithDefaults() FeedConfig {
	if c.Partitions == nil {
		c.Partitions = make([]int, noeta.Partitions)
		for i := range c.Partitions {
			c.Partitions[i] = i
		}
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if len(c.Backoff) == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	return c
}

// BackoffFor returns the wait before delivery attempt+1 after attempt failed.
func (c FeedConfig) BackoffFor(attempt int) time.Duration {
	b := c.Backoff
	if len(b) == 0 {
		b = DefaultBackoff
	}
	return b[min(max(attempt-1, 0), len(b)-1)]
}

// Delivery is one committed record handed to a consumer.
type Delivery struct {
	Env Envelope
	// Partition is the record's task's partition.
	Partition int
	// Attempt counts the deliveries of this record, from 1; above 1 the
	// record may have been handled before (the process died before its
	// acknowledgement), so handlers are idempotent by (task, seq or key).
	Attempt int
	// Pending is the consumer's lag: how much of the partition waits behind
	// this record, in the backend's units (JetStream: messages, each one
	// record or one batch of a task's records).
	Pending uint64
}

// FeedHandler handles one delivery. A nil error acknowledges the record; an
// error has it delivered again after the backoff, up to MaxDeliver times,
// after which it goes to the backend's dead-letter subject and the feed moves
// on. ctx ends when the consumer stops.
type FeedHandler func(ctx context.Context, d Delivery) error

// Feed is a durable, resumable stream of committed records — log and inbox
// records of every task — for consumer groups, with explicit
// acknowledgement. Records of one partition (hence of one task) are handed to
// a group one at a time, in commit order, whichever process of the group
// takes them. A record that cannot be decoded is quarantined (kept aside,
// counted) and skipped, never fatal.
type Feed interface {
	// Consume delivers records to h until ctx ends, then returns nil once the
	// delivery in hand is answered. An invalid config is ErrInvalidArgument.
	Consume(ctx context.Context, cfg FeedConfig, h FeedHandler) error
}
