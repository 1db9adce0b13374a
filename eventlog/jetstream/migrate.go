package jetstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
)

// The layout before the split (docs/adr/0032) had one wake stream,
// <PREFIX>_WAKE over <prefix>.wake.>, holding wakes from outside, the
// dispatcher's timer schedules and the copies the broker fired from them,
// with roll-ups allowed for the schedules' sake: any publisher of wakes
// could purge it. A store made that way is migrated when a Dispatcher
// opens it, losing nothing:
//
//  1. Its subjects are retired, so a publisher gets an error (no stream
//     takes the subject) rather than a message nobody will read; where the
//     unapplied messages begin (the ingress consumer's ack floor) is noted
//     in the stream's metadata first, so a migration cut short resumes
//     from the same place.
//  2. Every wake from there on is applied to its row, as the ingress would
//     have (a fired timer's copy as a fired timer); a row's record of
//     applied sequences makes one applied before a no-op.
//  3. The stream is deleted and today's ingress created in its place,
//     continuing its sequence numbers (rows remember applied sequences; the
//     first is noted on the timers stream before the delete).
//  4. Its schedules went with it: the Dispatcher's first reconcile pass
//     arms every timed suspend again from its row, or fires it if due.
//
// One Dispatcher should open the store first after an upgrade; two
// migrating at once apply each wake once (the rows' compare-and-set), but
// the later one's delete could remove the ingress the earlier one had just
// created, with what was published to it in between.

// migrateFromKey, in the retired stream's metadata, is the first sequence
// not known to be applied.
const migrateFromKey = "noeta_migrate_from"

// wakeFirstSeqKey, in the timers stream's metadata, is the first sequence
// of a wake ingress created after a migration.
const wakeFirstSeqKey = "noeta_wake_first_seq"

// openInputStreams opens (or creates) the timers stream and the wake
// ingress, migrating a wake stream of the layout before the split; it
// reports whether it migrated one.
func (d *Dispatcher) openInputStreams(ctx context.Context) (bool, error) {
	var err error
	if d.timers, err = ensureStream(ctx, d.js, TimerStreamConfig(d.cfg)); err != nil {
		return false, err
	}
	migrated, err := d.migrateLegacyWake(ctx)
	if err != nil {
		return false, err
	}
	want := WakeStreamConfig(d.cfg)
	if _, err := d.js.Stream(ctx, want.Name); errors.Is(err, jetstream.ErrStreamNotFound) {
		// Created now: after a migration (this one, or one cut short
		// between the old stream's delete and this create), its sequence
		// continues the old stream's, which the rows remember.
		info, err := d.timers.Info(ctx)
		if err != nil {
			return false, fmt.Errorf("jetstream: stream %s: %w", d.cfg.timerStream(), err)
		}
		if first, err := strconv.ParseUint(info.Config.Metadata[wakeFirstSeqKey], 10, 64); err == nil {
			want.FirstSeq = first
		}
	}
	if d.wake, err = ensureStream(ctx, d.js, want); err != nil {
		return false, err
	}
	return migrated, nil
}

// migrateLegacyWake migrates a wake stream of the layout before the split,
// if there is one (see above), up to its delete; openInputStreams creates
// today's ingress.
func (d *Dispatcher) migrateLegacyWake(ctx context.Context) (bool, error) {
	name := d.cfg.wakeStream()
	old, err := d.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("jetstream: stream %s: %w", name, err)
	}
	cfg := old.CachedInfo().Config
	if !cfg.AllowMsgSchedules {
		return false, nil // today's layout: ensureStream checks the rest
	}
	d.log.Warn("migrating the wake stream to the split layout (wake ingress and timers apart)", "stream", name)

	from, err := strconv.ParseUint(cfg.Metadata[migrateFromKey], 10, 64)
	if err != nil {
		from = old.CachedInfo().State.FirstSeq
		ci, err := d.js.Consumer(ctx, name, ingressConsumer)
		switch {
		case err == nil:
			from = max(from, ci.CachedInfo().AckFloor.Stream+1)
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return false, fmt.Errorf("jetstream: migrate %s: consumer %s: %w", name, ingressConsumer, err)
		}
		cfg.Subjects = []string{d.subj.prefix + ".retired.wake"}
		cfg.Metadata = maps.Clone(cfg.Metadata)
		if cfg.Metadata == nil {
			cfg.Metadata = map[string]string{}
		}
		cfg.Metadata[migrateFromKey] = strconv.FormatUint(from, 10)
		if _, err := d.js.UpdateStream(ctx, cfg); err != nil {
			return false, fmt.Errorf("jetstream: migrate %s: retire its subjects: %w", name, err)
		}
	}

	var last uint64
	for {
		info, err := old.Info(ctx)
		if err != nil {
			return false, fmt.Errorf("jetstream: migrate %s: %w", name, err)
		}
		if info.State.LastSeq <= last {
			break
		}
		for seq := max(from, last+1); seq <= info.State.LastSeq; seq++ {
			m, err := old.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("jetstream: migrate %s: message %d: %w", name, seq, err)
			}
			if _, ok := d.subj.taskOfWake(m.Subject); !ok {
				continue // a schedule: re-armed from its row
			}
			if v := d.applyWakeMsg(m.Subject, m.Header, m.Data, seq, m.Time, true); v == verdictRetry || v == verdictHold {
				return false, fmt.Errorf("jetstream: migrate %s: message %d could not be applied now; open again to resume", name, seq)
			}
		}
		last = info.State.LastSeq
	}

	// Where the new ingress's sequence begins is kept first, on the timers
	// stream, so a crash right after the delete cannot lose it.
	tc := d.timers.CachedInfo().Config
	tc.Metadata = maps.Clone(tc.Metadata)
	if tc.Metadata == nil {
		tc.Metadata = map[string]string{}
	}
	tc.Metadata[wakeFirstSeqKey] = strconv.FormatUint(last+1, 10)
	if d.timers, err = d.js.UpdateStream(ctx, tc); err != nil {
		return false, fmt.Errorf("jetstream: migrate %s: note the sequence on %s: %w", name, tc.Name, err)
	}
	if err := d.js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return false, fmt.Errorf("jetstream: migrate %s: delete it: %w", name, err)
	}
	d.log.Warn("migrated the wake stream", "stream", name, "applied_from", from, "last", last)
	return true, nil
}
