package jetstream_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/eventlogtest"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// The whole contract with group commit at its most eager: every write
// waits for the committer and goes in an atomic batch, even alone (ADR
// 0107).
func TestSuiteSingleNodeGroupCommit(t *testing.T) {
	eventlogtest.RunSuite(t, factoryConfig(singleURL, jetstream.Config{GroupCommit: 1}))
}

// TestGroupCommitManyTasks: many tasks writing packs at once through one Log
// whose every write goes in a group; every log reads back whole and in
// order, and every write is counted in a group.
func TestGroupCommitManyTasks(t *testing.T) {
	ctx := t.Context()
	l, err := jetstream.Open(ctx, connect(t, singleURL), jetstream.Config{Prefix: uniquePrefix(t, singleURL), Registry: liveRegistry{}, GroupCommit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const tasks, packs = 32, 6
	var wg sync.WaitGroup
	errs := make(chan error, tasks)
	ids := make([]string, tasks)
	for i := range tasks {
		ids[i] = noeta.NewTaskID()
		wg.Go(func() {
			task := ids[i]
			genesis, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
			if err != nil {
				errs <- err
				return
			}
			if _, err := l.Create(ctx, genesis); err != nil {
				errs <- err
				return
			}
			lease := eventlog.Lease{ID: "lease-" + task, Task: task, Generation: 1, Worker: "w"}
			for p := range packs {
				var envs []eventlog.Envelope
				for k := range 3 {
					env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "test", noeta.TurnStarted{Turn: p*3 + k + 1})
					if err != nil {
						errs <- err
						return
					}
					envs = append(envs, env)
				}
				if _, err := l.EmitBatch(ctx, lease, envs, eventlog.EmitOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, task := range ids {
		log, err := l.Read(ctx, task, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The genesis, the lease's grant, then the turns.
		if len(log) != 2+packs*3 {
			t.Fatalf("task %s has %d records, want %d", task, len(log), 2+packs*3)
		}
		for i, r := range log {
			if r.Seq != uint64(i+1) {
				t.Fatalf("task %s record %d has seq %d", task, i, r.Seq)
			}
		}
	}
	groups, writes, refused := l.GroupCommits()
	t.Logf("%d writes in %d groups, %d groups refused", writes, groups, refused)
	// Each task's creation, its first pack (with the lease's grant) and
	// the five after it.
	if want := uint64(tasks * (1 + packs)); writes != want || groups == 0 || refused != 0 {
		t.Errorf("%d writes in %d groups, %d refused; want all %d in groups, none refused", writes, groups, refused, want)
	}
}

// TestGroupCommitConfig: a negative GroupCommit and group commit on a
// replicated stream are refused, each naming the setting.
func TestGroupCommitConfig(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		cfg       jetstream.Config
		want      string
	}{
		{"negative", singleURL, jetstream.Config{GroupCommit: -1}, "Config.GroupCommit is -1"},
		{"replicated", clusterURL, jetstream.Config{Replicas: 3, GroupCommit: jetstream.DefaultGroupCommit}, "Config.GroupCommit is for a stream of one copy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jetstream.Open(t.Context(), connect(t, tc.url), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
