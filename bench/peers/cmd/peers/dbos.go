package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// dbosSystem runs a workflow of steps sequential steps, each returning its
// text argument (what noeta's echo tool does), with DBOS Transact on a
// PostgreSQL system database, in this process.
type dbosSystem struct {
	ctx   dbos.Context
	steps int
}

// echoWorkflow is the DBOS workflow: steps checkpointed steps, one after
// another.
func echoWorkflow(ctx dbos.Context, steps int) (string, error) {
	var last string
	for j := range steps {
		text := fmt.Sprintf("call %d", j)
		out, err := dbos.RunAsStep(ctx, func(context.Context) (string, error) { return text, nil },
			dbos.WithStepName("echo"))
		if err != nil {
			return "", fmt.Errorf("step %d: %w", j, err)
		}
		last = out
	}
	return last, nil
}

func openDBOS(ctx context.Context, url string, steps int) (*dbosSystem, error) {
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName:     "noeta-peers",
		DatabaseURL: url,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, fmt.Errorf("dbos context on %s: %w", url, err)
	}
	dbos.RegisterWorkflow(dctx, echoWorkflow)
	if err := dbos.Launch(dctx); err != nil {
		return nil, fmt.Errorf("launch dbos: %w", err)
	}
	return &dbosSystem{ctx: dctx, steps: steps}, nil
}

// run starts one workflow and waits for its result.
func (s *dbosSystem) run(_ context.Context, _ int) error {
	h, err := dbos.RunWorkflow(s.ctx, echoWorkflow, s.steps)
	if err != nil {
		return fmt.Errorf("start dbos workflow: %w", err)
	}
	out, err := h.GetResult()
	if err != nil {
		return fmt.Errorf("dbos workflow %s: %w", h.GetWorkflowID(), err)
	}
	if want := fmt.Sprintf("call %d", s.steps-1); out != want {
		return fmt.Errorf("dbos workflow %s: result %q, want %q", h.GetWorkflowID(), out, want)
	}
	return nil
}

func (s *dbosSystem) close() { dbos.Shutdown(s.ctx, 5*time.Second) }
