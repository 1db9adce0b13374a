//go:build linux

package nats_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
)

// check reads every task's log once more (into the history), then checks
// the history and the logs; each violation is an ANOMALY.
func (r *partitionRun) check(faultsOver, recovered time.Time, endedIn time.Duration, began time.Time) {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	anomalies := 0
	anomaly := func(format string, args ...any) {
		anomalies++
		t.Errorf("ANOMALY "+format, args...)
	}
	bound := 2 * partitionLeaseTTL
	// lateWake logs what the serves said of a task woken late, and, once,
	// their failed reconcile passes: a late wake is a signal no one
	// published, or one published and not taken, and these lines tell
	// which.
	passesShown := false
	lateWake := func(task string, envs []eventlog.Envelope, at int) {
		// The records around the wake: who wrote them (the actor names the
		// serve's pid), under which lease, when.
		for _, env := range envs[max(0, at-4):min(len(envs), at+3)] {
			t.Logf("  %s seq %d %s gen %d by %s @%s", task, env.Seq, env.Type, env.LeaseGen, env.Actor, env.Time.Format("15:04:05.000"))
		}
		t.Logf("the serves' lines of %s:", task)
		r.linesOf(task)
		if !passesShown {
			passesShown = true
			t.Logf("the serves' failed reconcile passes:")
			r.linesWith("reconcile pass failed", 40)
		}
	}

	// The side effects, by call tag.
	lines := map[string]int{}
	files, err := os.ReadDir(r.fx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		fh, err := os.Open(filepath.Join(r.fx, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			lines[f.Name()]++
		}
		_ = fh.Close()
	}

	answersOf := map[string]*taskRec{}
	var queue []string
	for _, tr := range r.allTasks() {
		answersOf[tr.id] = tr
		queue = append(queue, tr.id)
	}
	var (
		tasks, calls, interrupted, approved, denied, timers, groups int
		timerLate, groupLate                                        time.Duration
		recorded                                                    = map[string]bool{}
	)
	seen := map[string]bool{}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if seen[id] {
			continue
		}
		seen[id] = true
		var envs []eventlog.Envelope
		var err error
		for range 5 {
			call := time.Now()
			envs, err = r.e.log.Read(ctx, id, 0)
			r.hist.read(id, 2, call, time.Now(), envs, err)
			if err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Errorf("read %s: %v", id, err)
			continue
		}
		if len(envs) == 0 {
			// A submission never acknowledged that never happened.
			continue
		}
		tasks++
		st, err := checkDense(envs)
		if err != nil {
			anomaly("task %s: log not dense: %v", id, err)
			continue
		}
		if err := checkSingleWriter(envs); err != nil {
			anomaly("task %s: %v", id, err)
		}
		if st.Status != noeta.StatusTerminal {
			kind := "child"
			if tr := answersOf[id]; tr != nil {
				kind = tr.kind
			}
			ds, derr := r.e.disp.Inspect(ctx, id)
			var tail []string
			for _, env := range envs[max(0, len(envs)-6):] {
				tail = append(tail, fmt.Sprintf("%d:%s g%d @%s", env.Seq, env.Type, env.LeaseGen, env.Time.Format("15:04:05.000")))
			}
			anomaly("%s task %s is %s in its log after the calm window; row %s %s gen %d (%v); log tail %v", kind, id, st.Status,
				ds.Status, ds.Reason, ds.Generation, derr, tail)
		}
		requests := map[string]*noeta.ApprovalRequested{} // by call id
		resolved := map[string]*noeta.ApprovalResolved{}  // by handle
		started := map[string]string{}                    // call id -> tag
		finished := map[string]bool{}                     // call id
		var fireAt time.Time
		var children []string
		var groupWait bool
		for i, env := range envs {
			p, _, err := env.Decode()
			if err != nil {
				t.Fatalf("task %s seq %d: %v", id, env.Seq, err)
			}
			switch rec := p.(type) {
			case *noeta.ApprovalRequested:
				requests[rec.CallID] = rec
			case *noeta.ApprovalResolved:
				resolved[rec.Handle] = rec
			case *noeta.ToolCallStarted:
				if rec.Tool != "shell" {
					continue
				}
				var a struct{ Command string }
				_ = json.Unmarshal(rec.Args, &a)
				fields := strings.Fields(a.Command)
				tag := filepath.Base(fields[len(fields)-1])
				started[rec.CallID] = tag
				recorded[tag] = true
				if q, gated := requests[rec.CallID]; gated {
					r.checkApproved(id, tag, q, resolved[q.Handle], answersOf[id], anomaly)
					approved++
				}
			case *noeta.ToolCallFinished:
				tag, ok := started[rec.CallID]
				if !ok {
					continue
				}
				calls++
				finished[rec.CallID] = true
				switch {
				case lines[tag] > 1:
					anomaly("task %s: call %s (%s) ran %d times", id, rec.CallID, tag, lines[tag])
				case rec.OK && lines[tag] == 0:
					anomaly("task %s: call %s (%s) is recorded as done but never ran", id, rec.CallID, tag)
				case !rec.OK && strings.Contains(rec.Error, "interrupted"):
					interrupted++
				case !rec.OK:
					anomaly("task %s: call %s (%s) failed: %s", id, rec.CallID, tag, rec.Error)
				}
			case *noeta.SubtaskSpawned:
				children = append(children, rec.SubtaskID)
			case *noeta.TaskSuspended:
				fireAt, groupWait = time.Time{}, false
				switch rec.WakeOn.Kind {
				case noeta.WakeTimerFired:
					fireAt = rec.WakeOn.FireAt
				case noeta.WakeSubtaskGroupCompleted:
					groupWait = true
				}
			case *noeta.TaskWoken:
				switch {
				case rec.WakeEvent.Kind == noeta.WakeTimerFired && !fireAt.IsZero():
					late := env.Time.Sub(later(fireAt, recovered))
					timers++
					timerLate = max(timerLate, late)
					if late > bound {
						anomaly("task %s: a timer due %s fired %v late (from its due time or the recovery, whichever is later), bound %v",
							id, fireAt.Format("15:04:05.000"), late.Round(time.Millisecond), bound)
						lateWake(id, envs, i)
					}
				case rec.WakeEvent.Kind == noeta.WakeSubtaskGroupCompleted && groupWait:
					var lastChild time.Time
					for _, c := range children {
						cenvs, err := r.e.log.Read(ctx, c, 0)
						if err == nil && len(cenvs) > 0 {
							lastChild = later(lastChild, cenvs[len(cenvs)-1].Time)
						}
					}
					late := env.Time.Sub(later(lastChild, recovered))
					groups++
					groupLate = max(groupLate, late)
					if late > bound {
						anomaly("task %s: a group wake due %s came %v late, bound %v", id, lastChild.Format("15:04:05.000"), late.Round(time.Millisecond), bound)
						lateWake(id, envs, i)
					}
				}
			}
		}
		// A gated call that did not run: its request was denied or expired,
		// and no side effect of it exists.
		for callID, q := range requests {
			if _, ran := started[callID]; ran {
				continue
			}
			if res := resolved[q.Handle]; res != nil && res.Decision == noeta.ApprovalDeny {
				denied++
			}
		}
		// A terminal log states what became of every call it started.
		for callID, tag := range started {
			if st.Status == noeta.StatusTerminal && !finished[callID] {
				anomaly("task %s: call %s (%s, %d runs) started and its end was never recorded", id, callID, tag, lines[tag])
			}
		}
		queue = append(queue, children...)
	}
	for tag, n := range lines {
		if !recorded[tag] {
			anomaly("side effect %s (%d runs) belongs to no recorded call", tag, n)
		}
	}

	illegal, unknown := r.hist.check(filepath.Join(os.TempDir(), "noeta-partition-"+r.lab.id), time.Minute)
	for _, task := range illegal {
		anomaly("task %s: its history is not linearizable as a single-writer log (visualization in %s)", task,
			filepath.Join(os.TempDir(), "noeta-partition-"+r.lab.id, task+".html"))
	}
	if len(unknown) > 0 {
		t.Logf("the checker gave up on %d tasks' histories within its time: %v", len(unknown), unknown)
	}

	// Recovery after each fault.
	byKind := map[string]int{}
	var recs []time.Duration
	notRecovered := 0
	for _, f := range r.faults {
		byKind[f.kind]++
		recs = append(recs, f.recovered)
		if !f.recoveredWithin {
			notRecovered++
		}
	}
	slices.Sort(recs)
	p50, worst := time.Duration(0), time.Duration(0)
	if len(recs) > 0 {
		p50, worst = recs[len(recs)/2], recs[len(recs)-1]
	}
	t.Logf("RESULT form=%s seed=%d took=%v injections=%d %v ops=%d tasks=%d shell calls=%d (interrupted %d) gated calls run=%d denied=%d timers=%d (latest %v) group wakes=%d (latest %v) "+
		"anomalies=%d recover p50=%v max=%v (%d not within %v) all ended %v after the faults, netem=%v",
		r.size.name, r.seed, time.Since(began).Round(time.Second), len(r.faults), byKind, r.hist.count(), tasks, calls, interrupted, approved, denied,
		timers, timerLate.Round(time.Millisecond), groups, groupLate.Round(time.Millisecond),
		anomalies, p50.Round(100*time.Millisecond), worst.Round(100*time.Millisecond), notRecovered, r.size.recoverCap,
		endedIn.Round(time.Second), r.lab.netem)
	for _, k := range faultKinds {
		if byKind[k] == 0 {
			t.Errorf("no %s fault was injected", k)
			continue
		}
		var ds []time.Duration
		for _, f := range r.faults {
			if f.kind == k {
				ds = append(ds, f.recovered)
			}
		}
		slices.Sort(ds)
		t.Logf("RESULT kind=%s injections=%d recover p50=%v max=%v", k, len(ds), ds[len(ds)/2].Round(100*time.Millisecond), ds[len(ds)-1].Round(100*time.Millisecond))
	}
}

// checkApproved: a gated call ran, so its request was resolved approve,
// by a quorum, and every approver counted answered before the request
// expired.
func (r *partitionRun) checkApproved(task, tag string, q *noeta.ApprovalRequested, res *noeta.ApprovalResolved, tr *taskRec, anomaly func(string, ...any)) {
	if res == nil || res.Decision != noeta.ApprovalApprove {
		anomaly("task %s: gated call %s ran without an approve (resolution %+v)", task, tag, res)
		return
	}
	need := max(q.Quorum, 1)
	approvers := res.Approvers
	if len(approvers) == 0 {
		approvers = []string{res.Approver}
	}
	distinct := map[string]bool{}
	for _, a := range approvers {
		distinct[a] = true
	}
	if len(distinct) < need {
		anomaly("task %s: gated call %s ran on %d approvers %v, quorum %d", task, tag, len(distinct), approvers, need)
	}
	if tr == nil || q.ExpiresAt.IsZero() {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for a := range distinct {
		inTime := false
		for _, ans := range tr.answers {
			if ans.approver == a && ans.decision == noeta.ApprovalApprove && ans.call.Before(q.ExpiresAt) {
				inTime = true
			}
		}
		if !inTime {
			anomaly("task %s: gated call %s ran on %s's approve, which was first sent after the request expired at %s",
				task, tag, a, q.ExpiresAt.Format("15:04:05.000"))
		}
	}
}
