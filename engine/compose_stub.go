package engine

// A placeholder of the composer (engine/compose.go), so that this branch
// builds before it lands: same API, renders nothing. Deleted on merge.

import (
	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// ComposerConfig configures a [Composer].
type ComposerConfig struct{ MaxToolOutput int }

// Composer composes a task's transcript from its log.
type Composer struct{}

// NewComposer returns an empty composer.
func NewComposer(cfg ComposerConfig) *Composer { return &Composer{} }

// Apply takes one record of the task's log, in log order.
func (c *Composer) Apply(env eventlog.Envelope, p noeta.Payload) {}

// Transcript is the transcript so far.
func (c *Composer) Transcript() *noeta.Transcript { return &noeta.Transcript{} }

// MarshalJSON encodes the composer for a snapshot.
func (c *Composer) MarshalJSON() ([]byte, error) { return []byte("{}"), nil }

// UnmarshalJSON decodes a snapshot's composer.
func (c *Composer) UnmarshalJSON([]byte) error { return nil }
