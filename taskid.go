package noeta

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/oklog/ulid/v2"
)

// ErrInvalidTaskID is wrapped by [ValidateTaskID] for an id that cannot be used.
var ErrInvalidTaskID = errors.New("noeta: invalid task id")

// MaxTaskIDLen bounds a task id; ids are NATS subject tokens and key parts.
const MaxTaskIDLen = 64

// NewTaskID returns a fresh ULID task id: 26 characters, sortable by creation
// time, unique without coordination.
func NewTaskID() string { return ulid.Make().String() }

// NewID returns a fresh ULID for envelope ids, lease ids and call ids.
func NewID() string { return ulid.Make().String() }

// NewIDAt is NewID with the time part taken from t, for callers that have just
// read the clock (an append stamps its record with the same instant). Ids minted
// in one process are strictly increasing within a millisecond.
func NewIDAt(t time.Time) string {
	ms := t.UnixMilli()
	if ms < 0 || uint64(ms) > ulid.MaxTime() {
		return NewID()
	}
	return ulid.MustNew(uint64(ms), ulid.DefaultEntropy()).String()
}

// ValidateTaskID reports whether id matches [A-Za-z0-9_-]{1,64}. Task ids become
// NATS subject tokens and KV keys, so nothing else is accepted.
func ValidateTaskID(id string) error {
	return validateToken("task id", id, MaxTaskIDLen, ErrInvalidTaskID)
}

// ValidateToken checks a key used as a subject token (an inbox key, a wake handle
// used in a subject): [A-Za-z0-9_-]{1,max}. what names the field in the error.
func ValidateToken(what, s string, max int) error {
	return validateToken(what, s, max, nil)
}

func validateToken(what, s string, max int, sentinel error) error {
	wrap := func(msg string) error {
		if sentinel != nil {
			return fmt.Errorf("%w: %s %q %s", sentinel, what, s, msg)
		}
		return fmt.Errorf("%s %q %s", what, s, msg)
	}
	if s == "" {
		return wrap("is empty")
	}
	if len(s) > max {
		return wrap(fmt.Sprintf("is %d bytes long, the limit is %d", len(s), max))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			continue
		}
		return wrap(fmt.Sprintf("has %q at byte %d; only A-Z a-z 0-9 _ - are allowed", c, i))
	}
	return nil
}

// Partitions is the number of partitions tasks are spread over: subjects,
// consumers and observer workers divide the work by a task's partition,
// which is fixed forever.
const Partitions = 64

// Partition returns a task's partition: fnv32a(task) % Partitions.
func Partition(task string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(task))
	return int(h.Sum32() % Partitions)
}
