package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/hostconfig"
	"github.com/noeta-go/noeta/loadgen"
)

// noetaSystem runs the 20-call scripted task of `engine bench` (loadgen's
// config and script, no mix: every call an echo) on the embedded default:
// nats-server with JetStream in the process, sync always, on a data
// directory of its own.
//
// A run ends, for the caller, either when Host.Wait returns (wait), or when
// the task's terminal record is committed, seen through Host.Tap: Wait
// checks whether the task tree is at rest on a 50 ms tick once the end is
// in the log, which the peers' result calls do not pay.
type noetaSystem struct {
	h     *hostconfig.Host
	steps int
	wait  bool
	// cluster is the 3-node cluster the host runs on (noeta-r3), shut
	// down after the host; nil on the embedded default.
	cluster *embedded.Cluster

	mu    sync.Mutex
	ended map[string]chan string // task id → its terminal record's type
	untap func()
}

func openNoeta(ctx context.Context, dir string, workers, steps int, wait bool) (*noetaSystem, error) {
	return openNoetaOn(ctx, hostconfig.Options{DataDir: dir}, nil, workers, steps, wait)
}

// openNoetaR3 starts a 3-node JetStream cluster in this process, the nodes
// on loopback, each storing under dir/n1, dir/n2, dir/n3 with sync always
// (embedded.StartCluster, as the repository's cluster tests run one), and
// opens the host on it over TCP with every stream and bucket at 3
// replicas: a write is acknowledged once two of the three nodes have it
// stored. The three nodes share this machine's disk and cores, so the row
// shows what replication's protocol costs, not what a cluster of three
// machines would do. Starting it again on the same dir brings the nodes
// back with their data, as the embedded default keeps its data directory
// between measurements.
func openNoetaR3(ctx context.Context, dir string, workers, steps int) (*noetaSystem, error) {
	cl, err := embedded.StartCluster(ctx, embedded.ClusterConfig{Dir: dir, Size: 3, ReadyTimeout: 2 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("start a 3-node cluster on %s: %w", dir, err)
	}
	s, err := openNoetaOn(ctx, hostconfig.Options{NATS: hostconfig.Connection{URL: cl.ClientURL()}, Replicas: 3}, cl, workers, steps, false)
	if err != nil {
		cl.Shutdown()
		return nil, err
	}
	return s, nil
}

// openNoetaOn opens the host of the scripted task on the server base
// names (its NATS, DataDir and Replicas); cl, if set, is the cluster it
// runs on, shut down by close.
func openNoetaOn(ctx context.Context, base hostconfig.Options, cl *embedded.Cluster, workers, steps int, wait bool) (*noetaSystem, error) {
	cfg, err := loadgen.Config(steps)
	if err != nil {
		return nil, fmt.Errorf("noeta config: %w", err)
	}
	o := base
	o.Config, o.Workers, o.Name = cfg, workers, "peers"
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	h, err := hostconfig.Open(ctx, o)
	if err != nil {
		where := o.DataDir
		if o.NATS.URL != "" {
			where = o.NATS.URL
		}
		return nil, fmt.Errorf("open noeta host on %s: %w", where, err)
	}
	s := &noetaSystem{h: h, steps: steps, wait: wait, cluster: cl, ended: map[string]chan string{}}
	s.untap = h.Tap(s.tap)
	return s, nil
}

// durableWrites counts the writes to the task stream whose acknowledgement
// the engine waited for (jetstream.Log.DurableWaits): the figure
// BenchmarkDurableWaits and `engine bench` report per tool call.
func (s *noetaSystem) durableWrites() uint64 { return s.h.Log().DurableWaits() }

// groupedWrites counts the group commits (ADR 0107) and the writes they
// held.
func (s *noetaSystem) handOffs() uint64 { return s.h.Dispatcher().Stats().HandOffs }

func (s *noetaSystem) groupedWrites() (groups, writes uint64) {
	groups, writes, _ = s.h.Log().GroupCommits()
	return groups, writes
}

// tap hands a task's terminal record to the run waiting for it.
func (s *noetaSystem) tap(_ context.Context, env eventlog.Envelope) error {
	switch env.Type {
	case noeta.TypeTaskCompleted, noeta.TypeTaskFailed, noeta.TypeTaskCancelled:
		s.mu.Lock()
		ch := s.ended[env.Task]
		delete(s.ended, env.Task)
		s.mu.Unlock()
		if ch != nil {
			ch <- env.Type // buffered: never blocks the writer
		}
	}
	return nil
}

// run submits one task and waits for it to be completed.
func (s *noetaSystem) run(ctx context.Context, i int) error {
	script, err := loadgen.Script(i, s.steps, loadgen.Mix{})
	if err != nil {
		return fmt.Errorf("script: %w", err)
	}
	_, err = s.submitAndWait(ctx, i, script)
	return err
}

// submitAndWait submits the i-th task with script and waits for it to be
// completed; it returns the task's id.
func (s *noetaSystem) submitAndWait(ctx context.Context, i int, script json.RawMessage) (string, error) {
	id := fmt.Sprintf("peers-%d-%d", time.Now().UnixNano(), i+1)
	ch := make(chan string, 1)
	s.mu.Lock()
	s.ended[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.ended, id)
		s.mu.Unlock()
	}()
	if _, err := s.h.Submit(ctx, host.Submission{ID: id, Agent: loadgen.Agent, Goal: "peers", Script: script}); err != nil {
		return id, fmt.Errorf("submit: %w", err)
	}
	if s.wait {
		rest, err := s.h.Wait(ctx, id)
		if err != nil {
			return id, fmt.Errorf("wait for %s: %w", id, err)
		}
		if rest.Status != host.RestCompleted {
			return id, fmt.Errorf("task %s ended %v: %s", id, rest.Status, rest.Detail)
		}
		return id, nil
	}
	select {
	case <-ctx.Done():
		return id, fmt.Errorf("wait for %s: %w", id, ctx.Err())
	case typ := <-ch:
		if typ != noeta.TypeTaskCompleted {
			return id, fmt.Errorf("task %s ended with %s", id, typ)
		}
		return id, nil
	}
}

func (s *noetaSystem) close() {
	s.untap()
	s.h.Close()
	if s.cluster != nil {
		s.cluster.Shutdown()
	}
}
