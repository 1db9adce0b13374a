package taskview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/tasklist"
	"github.com/noeta-go/noeta/timeline"
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

// Inspect writes task's folded state, its dispatcher's row and its
// decisions to w ([WriteState] and [WriteTurns], or with asJSON
// [InspectJSON], one line), then checks the log's tail.
// note gets what the fold says about how it read the log, before any
// error of it. A task with no log is an error that says whether it is
// unknown or its log was lost.
func Inspect(ctx context.Context, h *hostconfig.Host, task string, asJSON bool, w io.Writer, note func(string)) error {
	// The fold reads from the newest snapshot on; the whole log is read
	// first, so a hole before the snapshot is not folded over.
	envs, err := h.Events(ctx, task, 0)
	if err != nil {
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
		b, err := InspectJSON(state, ds, known, envs)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
	} else {
		WriteState(w, state, ds, known)
		WriteTurns(w, envs)
	}
	return TailCheck(ctx, h, state, ds, known)
}

// WriteTasks lists the deployment's tasks that match f, most recently
// active first ([tasklist.List]): a table, or with asJSON one JSON object
// per task per line; a note on msgs says when more matched than --limit
// let through. Then it reads each listed log whole, since a fold reads
// from the newest snapshot and a hole before it shows only to a read of the
// whole log: a damaged store is an error naming every damage, after the
// list.
func WriteTasks(ctx context.Context, h *hostconfig.Host, f tasklist.Filter, asJSON bool, w, msgs io.Writer) error {
	p, err := tasklist.List(ctx, h, f)
	if err != nil {
		return err
	}
	var damaged []error
	if err := h.CheckStream(ctx); err != nil {
		damaged = append(damaged, err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "TASK\tAGENT\tSTATUS\tLAST RECORD\tGOAL\tOUTCOME")
	}
	enc := json.NewEncoder(w)
	for _, r := range p.Rows {
		if asJSON {
			if err := enc.Encode(r); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Task, orDash(timeline.Cut(r.Agent, 24)), r.Status,
				r.Last.Local().Format("2006-01-02 15:04:05"), orDash(timeline.Cut(r.Goal, 40)), orDash(timeline.Cut(outcome(r), 60)))
		}
		if r.Status == tasklist.Unreadable {
			damaged = append(damaged, errors.New(r.Reason))
			continue
		}
		if _, err := h.Events(ctx, r.Task, 0); err != nil {
			if !eventlog.IsDamage(err) {
				return err
			}
			damaged = append(damaged, err)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.More {
		fmt.Fprintf(msgs, "engine: note: more tasks match; raise --limit (now %d) to see them\n", f.Limit)
	}
	if len(damaged) > 0 {
		return DamagedHint(errors.Join(damaged...))
	}
	return nil
}

// outcome is what came of a task, for its row: a completed task's answer,
// a failed or cancelled one's reason, the handles a waiting one waits on,
// what a suspended one waits for.
func outcome(r tasklist.Row) string {
	switch {
	case r.Status == tasklist.Completed:
		return r.Answer
	case len(r.Waiting) > 0:
		return "waits on " + strings.Join(r.Waiting, ", ")
	}
	return r.Reason
}

// MaxRefs bounds the content refs Content collects from one record.
const MaxRefs = 256

// Content writes a body of the content store to w: args is a REF (its
// sha256, with sha256: in front or not), or TASK SEQ, the body the record
// at seq of task refers to; field picks one of several refs by its key
// (response_ref) or its path (calls.0.args_ref).
func Content(ctx context.Context, h *hostconfig.Host, args []string, seq uint64, field string, w io.Writer) error {
	var ref noeta.ContentRef
	if len(args) == 1 {
		ref.Hash = strings.TrimPrefix(strings.ToLower(args[0]), "sha256:")
		if len(ref.Hash) != 64 || strings.Trim(ref.Hash, "0123456789abcdef") != "" {
			return fmt.Errorf("%w: REF %q: want a sha256, 64 hex digits (events --json shows each ref's hash), or TASK SEQ", ErrBadArgument, args[0])
		}
	} else {
		task := args[0]
		envs, err := h.Events(ctx, task, seq-1)
		if errors.Is(err, eventlog.ErrNotFound) {
			return NoTask(ctx, h, task)
		}
		if err != nil {
			return DamagedHint(err)
		}
		if len(envs) == 0 || envs[0].Seq != seq {
			return fmt.Errorf("task %s has no record #%d", task, seq)
		}
		var v any
		if err := json.Unmarshal(envs[0].Payload, &v); err != nil {
			return fmt.Errorf("task %s: record #%d does not decode: %w", task, seq, err)
		}
		var found []foundRef
		collectRefs(v, "", &found)
		var paths []string
		for _, f := range found {
			if field == "" || f.path == field || f.key == field {
				ref = f.ref
				paths = append(paths, f.path)
			}
		}
		switch {
		case len(found) == 0:
			return fmt.Errorf("record #%d of task %s (%s) keeps nothing in the content store", seq, task, envs[0].Type)
		case len(paths) == 0:
			return fmt.Errorf("%w: --field %q: record #%d of task %s refers to %s", ErrBadArgument, field, seq, task, refPaths(found))
		case len(paths) > 1:
			return fmt.Errorf("%w: record #%d of task %s refers to %s: name one with --field", ErrBadArgument, seq, task, refPaths(found))
		}
	}
	b, err := h.Content(ctx, ref)
	if errors.Is(err, eventlog.ErrNotFound) {
		return fmt.Errorf("the content store has no body sha256 %s", ref.Hash)
	}
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		_, err = io.WriteString(w, "\n")
	}
	return err
}

// ErrBadArgument is a command line that names what cannot be read: the
// CLI's exit 2.
var ErrBadArgument = errors.New("bad argument")

type foundRef struct {
	path, key string
	ref       noeta.ContentRef
}

// collectRefs finds the content refs in a decoded payload: objects under
// a key ending in _ref that carry a hash, at any depth, up to MaxRefs.
func collectRefs(v any, path string, out *[]foundRef) {
	if len(*out) >= MaxRefs {
		return
	}
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if m, ok := t[k].(map[string]any); ok && strings.HasSuffix(k, "_ref") {
				if h, ok := m["hash"].(string); ok {
					*out = append(*out, foundRef{path: p, key: k, ref: noeta.ContentRef{Hash: h}})
					continue
				}
			}
			collectRefs(t[k], p, out)
		}
	case []any:
		for i, e := range t {
			collectRefs(e, fmt.Sprintf("%s.%d", path, i), out)
		}
	}
}

func refPaths(found []foundRef) string {
	ps := make([]string, len(found))
	for i, f := range found {
		ps[i] = f.path
	}
	return strings.Join(ps, ", ")
}
