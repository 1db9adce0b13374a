package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
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

	mu    sync.Mutex
	ended map[string]chan string // task id → its terminal record's type
	untap func()
}

func openNoeta(ctx context.Context, dir string, workers, steps int, wait bool) (*noetaSystem, error) {
	cfg, err := loadgen.Config(steps)
	if err != nil {
		return nil, fmt.Errorf("noeta config: %w", err)
	}
	h, err := hostconfig.Open(ctx, hostconfig.Options{
		DataDir: dir,
		Config:  cfg,
		Workers: workers,
		Name:    "peers",
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})),
	})
	if err != nil {
		return nil, fmt.Errorf("open noeta host on %s: %w", dir, err)
	}
	s := &noetaSystem{h: h, steps: steps, wait: wait, ended: map[string]chan string{}}
	s.untap = h.Tap(s.tap)
	return s, nil
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
		return fmt.Errorf("submit: %w", err)
	}
	if s.wait {
		rest, err := s.h.Wait(ctx, id)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", id, err)
		}
		if rest.Status != host.RestCompleted {
			return fmt.Errorf("task %s ended %v: %s", id, rest.Status, rest.Detail)
		}
		return nil
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("wait for %s: %w", id, ctx.Err())
	case typ := <-ch:
		if typ != noeta.TypeTaskCompleted {
			return fmt.Errorf("task %s ended with %s", id, typ)
		}
		return nil
	}
}

func (s *noetaSystem) close() {
	s.untap()
	s.h.Close()
}
