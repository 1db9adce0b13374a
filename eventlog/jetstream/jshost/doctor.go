package jshost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// Doctor: check a store for what the server's own recovery may have lost
// silently.

// Finding is one problem [Backend.Doctor] found.
type Finding struct {
	Kind string `json:"kind"`
	Task string `json:"task,omitempty"`
	// Seqs are the log seqs concerned: "37", "32-41", "32-" (from 32 to
	// the end, however far that was).
	Seqs string `json:"seqs,omitempty"`
	// StreamSeq is the stream sequence of a corrupt record.
	StreamSeq uint64 `json:"stream_seq,omitempty"`
	Detail    string `json:"detail"`
}

// DoctorReport is what [Backend.Doctor] found.
type DoctorReport struct {
	Clean    bool      `json:"clean"`
	Tasks    int       `json:"tasks"`
	Records  int       `json:"records"`
	Rows     int       `json:"rows"`
	Problems []Finding `json:"problems"`
	// Sandbox is the sandbox's state on this machine, when the caller
	// checked it (it knows the config).
	Sandbox *SandboxReport `json:"sandbox,omitempty"`
}

// SandboxReport is what engine doctor says of the sandbox.
type SandboxReport struct {
	// Enabled: the config (or its absence: the default) confines some
	// tool process.
	Enabled bool `json:"enabled"`
	// Available: a confined process ran here; Error says why not.
	Available      bool   `json:"available"`
	Error          string `json:"error,omitempty"`
	LandlockABI    int    `json:"landlock_abi"`
	Seccomp        bool   `json:"seccomp"`
	UserNamespaces bool   `json:"user_namespaces"`
	// Disabled lists where the config turns the sandbox off.
	Disabled []string `json:"disabled,omitempty"`
}

// Add records f, once: a corrupt last record is met by the index and by the
// read of its log.
func (r *DoctorReport) Add(f Finding) {
	f.Detail = strings.Join(strings.Fields(f.Detail), " ")
	if slices.Contains(r.Problems, f) {
		return
	}
	r.Problems = append(r.Problems, f)
	r.Clean = false
}

// doctorLog is the read side doctor needs of the task stream.
type doctorLog interface {
	eventlog.Reader
	eventlog.TaskIndex
	GetMany(ctx context.Context, refs []noeta.ContentRef) (map[string][]byte, error)
	CheckStream(ctx context.Context) error
}

// doctorRows is the read side doctor needs of the dispatcher's rows.
type doctorRows interface {
	Tasks(ctx context.Context) ([]string, error)
	Inspect(ctx context.Context, task string) (eventlog.DispatchState, error)
}

// corruptions collects what the lenient reads report.
type corruptions struct {
	mu   sync.Mutex
	errs []error
}

func (c *corruptions) report(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// take returns the reports since the last take.
func (c *corruptions) take() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.errs
	c.errs = nil
	return out
}

// Doctor checks the store of the host's deployment: every task's log dense
// and decodable, the dispatcher's rows consistent with the logs, every
// content body present. It reads; it repairs nothing. The report comes back
// also when it found problems; an error means it could not check.
func (b *Backend) Doctor(ctx context.Context) (*DoctorReport, error) {
	rep := &DoctorReport{Clean: true, Problems: []Finding{}}
	var bad corruptions
	reader, err := jetstream.OpenReader(ctx, b.nc, jetstream.Config{Prefix: b.opts.Prefix, OnCorrupt: bad.report})
	if errors.Is(err, jetstream.ErrStreamLost) {
		return StreamLostReport(err), nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = reader.Close() }()
	rows, err := jetstream.OpenRowReader(ctx, b.nc, b.opts.Prefix)
	if err != nil {
		return nil, err
	}
	d := &doctor{log: reader, rows: rows, bad: &bad, rep: rep}
	if err := d.run(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

// StreamLostReport is the report of a store whose task stream is gone
// (jetstream.ErrStreamLost): nothing else can be checked.
func StreamLostReport(err error) *DoctorReport {
	rep := &DoctorReport{Clean: true, Problems: []Finding{}}
	rep.Add(Finding{Kind: "stream_lost", Detail: err.Error()})
	return rep
}

type doctor struct {
	log  doctorLog
	rows doctorRows
	bad  *corruptions
	rep  *DoctorReport
}

func (d *doctor) run(ctx context.Context) error {
	if err := d.log.CheckStream(ctx); err != nil {
		var loss *jetstream.StreamLossError
		if !errors.As(err, &loss) {
			return err
		}
		d.rep.Add(Finding{Kind: "stream_loss", Detail: err.Error() + "; the tasks that lost records are listed below where their logs show it"})
	}
	sums, err := d.log.Tasks(ctx)
	if err != nil {
		return err
	}
	last := map[string]uint64{}
	for _, s := range sums {
		last[s.Task] = s.LastSeq
	}
	// A log whose last record is corrupt is left out of the index and
	// reported through OnCorrupt: it is still a task to check.
	for _, err := range d.bad.take() {
		if task := corruptTask(err); task != "" {
			if _, ok := last[task]; !ok {
				last[task] = 0
			}
		}
		d.corrupt("corrupt", err)
	}
	rowTasks, err := d.rows.Tasks(ctx)
	if err != nil {
		return err
	}
	d.rep.Rows = len(rowTasks)
	tasks := slices.Collect(maps.Keys(last))
	for _, t := range rowTasks {
		if _, ok := last[t]; !ok {
			tasks = append(tasks, t)
		}
	}
	slices.Sort(tasks)
	d.rep.Tasks = len(last)
	for _, task := range tasks {
		if err := ctx.Err(); err != nil {
			return err
		}
		lastSeq, hasLog := last[task]
		if err := d.task(ctx, task, hasLog, lastSeq); err != nil {
			return err
		}
	}
	return nil
}

// corruptTask is the task a corrupt-record report is about, if it says.
func corruptTask(err error) string {
	var c *jetstream.CorruptRecordError
	if errors.As(err, &c) {
		return c.Task()
	}
	return ""
}

// corrupt adds the corrupt records among errs as findings of kind; gaps are
// found by doctor itself, from the Seqs it reads.
func (d *doctor) corrupt(kind string, errs ...error) {
	for _, err := range errs {
		var c *jetstream.CorruptRecordError
		switch {
		case errors.As(err, &c):
			d.rep.Add(Finding{Kind: kind, Task: c.Task(), StreamSeq: c.StreamSeq, Detail: err.Error()})
		case errors.Is(err, eventlog.ErrGap):
		default:
			d.rep.Add(Finding{Kind: kind, Detail: err.Error()})
		}
	}
}

// task checks one task: its log, its inbox, its content and its row.
func (d *doctor) task(ctx context.Context, task string, hasLog bool, lastSeq uint64) error {
	row0, rowErr := d.rows.Inspect(ctx, task)
	hasRow := rowErr == nil
	if rowErr != nil && !errors.Is(rowErr, eventlog.ErrNotFound) {
		return rowErr
	}
	if !hasLog {
		d.rep.Add(Finding{Kind: "row_without_log", Task: task, Seqs: "1-",
			Detail: fmt.Sprintf("the dispatcher has the task (%s, lease generation %d) and the stream has no record of it: its whole log is lost", row0.Status, row0.Generation)})
		return nil
	}
	envs, err := d.log.Read(ctx, task, 0)
	if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
		return err
	}
	d.corrupt("corrupt", d.bad.take()...)
	d.rep.Records += len(envs)
	dense := d.gaps(task, envs, lastSeq)

	inbox, err := d.log.Inbox(ctx, task)
	if err != nil && !errors.Is(err, eventlog.ErrNotFound) {
		return err
	}
	d.corrupt("inbox_corrupt", d.bad.take()...)
	if err := d.content(ctx, task, append(envs, inbox...)); err != nil {
		return err
	}

	if !hasRow {
		d.rep.Add(Finding{Kind: "log_without_row", Task: task,
			Detail: fmt.Sprintf("the log has %d records and the dispatcher has no row: nothing will ever run the task", len(envs))})
		return nil
	}
	if !dense || len(envs) == 0 {
		return nil // the gap is the Finding; a fold of what is left says nothing
	}
	st, err := engine.Fold(envs)
	if err != nil {
		d.rep.Add(Finding{Kind: "bad_log", Task: task, Detail: err.Error()})
		return nil
	}
	// The row and the log are two reads: a live task may move between
	// them. A row that is the same after the log was read held while it was.
	row1, err := d.rows.Inspect(ctx, task)
	if err != nil || row1.Status != row0.Status || row1.Generation != row0.Generation || row1.LeaseID != row0.LeaseID {
		return nil
	}
	if f, ok := RowAgainstLog(task, row0, st, envs[len(envs)-1]); ok {
		d.rep.Add(f)
	}
	return nil
}

// gaps adds a Finding for every hole in envs, a log whose last seq is last
// (0: unknown), and reports whether it is dense.
func (d *doctor) gaps(task string, envs []eventlog.Envelope, last uint64) bool {
	dense := true
	want := uint64(1)
	for _, env := range envs {
		if env.Seq > want {
			g := eventlog.GapError{Task: task, After: want - 1, First: want, Last: env.Seq - 1, Next: env.Seq}
			d.rep.Add(Finding{Kind: "gap", Task: task, Seqs: g.Seqs(), Detail: g.Error()})
			dense = false
		}
		if env.Seq >= want {
			want = env.Seq + 1
		}
	}
	if last >= want {
		g := eventlog.GapError{Task: task, After: want - 1, First: want, Last: last}
		d.rep.Add(Finding{Kind: "gap", Task: task, Seqs: g.Seqs(), Detail: g.Error()})
		dense = false
	}
	return dense
}

// content adds a Finding for every content ref in envs whose body is not in
// the content store.
func (d *doctor) content(ctx context.Context, task string, envs []eventlog.Envelope) error {
	type use struct {
		env   eventlog.Envelope
		field string
	}
	uses := map[string][]use{}
	var refs []noeta.ContentRef
	for _, env := range envs {
		var v any
		if json.Unmarshal(env.Payload, &v) != nil {
			continue // the fold or the decoder reports it
		}
		walkRefs(v, "", func(field string, ref noeta.ContentRef) {
			if _, seen := uses[ref.Hash]; !seen {
				refs = append(refs, ref)
			}
			uses[ref.Hash] = append(uses[ref.Hash], use{env, field})
		})
	}
	if len(refs) == 0 {
		return nil
	}
	got, err := d.log.GetMany(ctx, refs)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		if _, ok := got[ref.Hash]; ok {
			continue
		}
		for _, u := range uses[ref.Hash] {
			f := Finding{Kind: "content_missing", Task: task,
				Detail: fmt.Sprintf("%s.%s names body %s (%d bytes), which is not in the content store", u.env.Type, u.field, ref.Hash, ref.Size)}
			if u.env.Seq > 0 {
				f.Seqs = strconv.FormatUint(u.env.Seq, 10)
			} else {
				f.Detail = "inbox record " + u.env.Key + ": " + f.Detail
			}
			d.rep.Add(f)
		}
	}
	return nil
}

// walkRefs calls fn with every content ref in a decoded payload: a member
// named *_ref whose value is an object with a hash.
func walkRefs(v any, path string, fn func(field string, ref noeta.ContentRef)) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if obj, ok := val.(map[string]any); ok && strings.HasSuffix(k, "_ref") {
				if h, ok := obj["hash"].(string); ok && h != "" {
					size, _ := obj["size"].(float64)
					mt, _ := obj["media_type"].(string)
					fn(p, noeta.ContentRef{Hash: h, Size: int64(size), MediaType: mt})
					continue
				}
			}
			walkRefs(val, p, fn)
		}
	case []any:
		for i, val := range x {
			walkRefs(val, path+"["+strconv.Itoa(i)+"]", fn)
		}
	}
}

// endedOutsideTheLog are the reasons a row ends or suspends with while the
// log says nothing of it: the dispatcher's own, and the engine's refusals.
func endedOutsideTheLog(reason string) bool {
	// A task the dispatcher gave up on ends with its TaskFailed in the
	// log, written by the lease that carries the reason; only when that
	// lease failed too does the row end alone, with the reason (and, for
	// failures, the last one's) it was given up with.
	for _, p := range []string{eventlog.ReasonStaleReclaimExceeded, eventlog.ReasonMaxAttemptsExceeded, eventlog.ReasonLeaseQuotaExceeded,
		engine.ReasonDamagedLog, engine.ErrWakeRecovery.Error()} {
		if strings.HasPrefix(reason, p) {
			return true
		}
	}
	return false
}

// RowAgainstLog compares a dispatcher row with the fold of a dense log. A
// worker releases a task as suspended or terminal only after the record that
// says so is in the log, so a row that is further along than its log is a
// log that lost its end.
func RowAgainstLog(task string, ds eventlog.DispatchState, st *engine.State, last eventlog.Envelope) (Finding, bool) {
	lost := func(what string) (Finding, bool) {
		return Finding{Kind: "tail_lost", Task: task, Seqs: strconv.FormatUint(last.Seq+1, 10) + "-",
			Detail: fmt.Sprintf("%s, but the log ends at seq %d with %s (%s): the records after it are lost", what, last.Seq, last.Type, st.Status)}, true
	}
	if endedOutsideTheLog(ds.Reason) {
		return Finding{}, false
	}
	switch ds.Status {
	case eventlog.DispatchTerminal:
		if st.Status != noeta.StatusTerminal {
			return lost(fmt.Sprintf("the dispatcher says the task ended (%q)", ds.Reason))
		}
	case eventlog.DispatchSuspended:
		if st.Status != noeta.StatusSuspended {
			return lost(fmt.Sprintf("the dispatcher says the task is suspended (%q)", ds.Reason))
		}
	}
	return Finding{}, false
}
