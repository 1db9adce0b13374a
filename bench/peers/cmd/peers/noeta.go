package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/loadgen"
)

// noetaSystem runs the 20-call scripted task of `engine bench` (loadgen's
// config and script, no mix: every call an echo) on the embedded default:
// nats-server with JetStream in the process, sync always, on a data
// directory of its own.
type noetaSystem struct {
	h     *host.Host
	steps int
}

func openNoeta(ctx context.Context, dir string, workers, steps int) (*noetaSystem, error) {
	cfg, err := loadgen.Config(steps)
	if err != nil {
		return nil, fmt.Errorf("noeta config: %w", err)
	}
	h, err := host.Open(ctx, host.Options{
		DataDir: dir,
		Config:  cfg,
		Workers: workers,
		Name:    "peers",
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4})),
	})
	if err != nil {
		return nil, fmt.Errorf("open noeta host on %s: %w", dir, err)
	}
	return &noetaSystem{h: h, steps: steps}, nil
}

// run submits one task and waits for it to be completed.
func (s *noetaSystem) run(ctx context.Context, i int) error {
	script, err := loadgen.Script(i, s.steps, loadgen.Mix{})
	if err != nil {
		return fmt.Errorf("script: %w", err)
	}
	id, err := s.h.Submit(ctx, host.Submission{Agent: loadgen.Agent, Goal: "peers", Script: script})
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	rest, err := s.h.Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("wait for %s: %w", id, err)
	}
	if rest.Status != host.RestCompleted {
		return fmt.Errorf("task %s ended %v: %s", id, rest.Status, rest.Detail)
	}
	return nil
}

func (s *noetaSystem) close() { s.h.Close() }
