package taskview

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/hostconfig"
)

// CheckTail folds task and compares its log's tail with the dispatcher's
// row ([TailCheck]): what engine events says after the records it printed,
// since a log that lost its last records looks whole to a reader.
func CheckTail(ctx context.Context, h *hostconfig.Host, task string) error {
	state, _, err := h.Fold(ctx, task)
	if err != nil {
		return DamagedHint(err)
	}
	ds, known, err := DispatchState(ctx, h, task)
	if err != nil {
		return err
	}
	return TailCheck(ctx, h, state, ds, known)
}

// Inspect writes task's folded state and its dispatcher's row to w
// ([WriteState], or with asJSON [StateJSON]), then checks the log's tail.
// note gets what the fold says about how it read the log, before any
// error of it. A task with no log is an error that says whether it is
// unknown or its log was lost.
func Inspect(ctx context.Context, h *hostconfig.Host, task string, asJSON bool, w io.Writer, note func(string)) error {
	// The fold reads from the newest snapshot on; the whole log is read
	// first, so a hole before the snapshot is not folded over.
	if _, err := h.Events(ctx, task, 0); err != nil {
		if errors.Is(err, eventlog.ErrNotFound) {
			return NoTask(ctx, h, task)
		}
		return DamagedHint(err)
	}
	state, n, err := h.Fold(ctx, task)
	if n != "" {
		note(n)
	}
	if err != nil {
		if errors.Is(err, eventlog.ErrNotFound) {
			return fmt.Errorf("no task %s in this deployment", task)
		}
		return err
	}
	ds, known, err := DispatchState(ctx, h, task)
	if err != nil {
		return err
	}
	if asJSON {
		b, err := StateJSON(state, ds, known)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
	} else {
		WriteState(w, state, ds, known)
	}
	return TailCheck(ctx, h, state, ds, known)
}

// WriteTasks lists the deployment's tasks, most recently active first:
// each one's id, dispatcher status, records and last record's time. Then
// it reads every log whole, since the listing reads only each log's last
// record and a hole before it shows only to a read of the whole log: a
// damaged store is an error naming every damage, after the list.
func WriteTasks(ctx context.Context, h *hostconfig.Host, w io.Writer) error {
	sums, err := h.Tasks(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%-26s  %-10s  %7s  %s\n", "TASK", "DISPATCH", "RECORDS", "LAST RECORD")
	var damaged []error
	if err := h.CheckStream(ctx); err != nil {
		damaged = append(damaged, err)
	}
	for _, s := range sums {
		status := "-"
		if ds, known, err := DispatchState(ctx, h, s.Task); err == nil && known {
			status = string(ds.Status)
		}
		fmt.Fprintf(w, "%-26s  %-10s  %7d  %s\n", s.Task, status, s.LastSeq, s.LastTime.Format(time.RFC3339))
		if _, err := h.Events(ctx, s.Task, 0); err != nil {
			if !eventlog.IsDamage(err) {
				return err
			}
			damaged = append(damaged, err)
		}
	}
	if len(damaged) > 0 {
		return DamagedHint(errors.Join(damaged...))
	}
	return nil
}
