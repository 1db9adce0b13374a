package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
)

const (
	temporalNamespace = "default"
	temporalQueue     = "noeta-peers"
)

// temporalSystem runs a workflow of steps sequential activities, each
// returning its text argument (what noeta's echo tool does), on a Temporal
// server; the SDK worker (on its default options) and the client are in
// this process.
type temporalSystem struct {
	c     client.Client
	w     worker.Worker
	steps int
}

// Echo is the activity: it returns its text.
func Echo(_ context.Context, text string) (string, error) { return text, nil }

// EchoWorkflow runs steps Echo activities one after another.
func EchoWorkflow(ctx workflow.Context, steps int) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var last string
	for j := range steps {
		if err := workflow.ExecuteActivity(ctx, Echo, fmt.Sprintf("call %d", j)).Get(ctx, &last); err != nil {
			return "", fmt.Errorf("activity %d: %w", j, err)
		}
	}
	return last, nil
}

func temporalLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
}

// registerNamespace registers the default namespace on the server at addr
// (the plain server creates none), retrying while the server starts; an
// existing namespace is fine.
func registerNamespace(ctx context.Context, addr string) error {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: addr, Logger: temporalLogger()})
	if err != nil {
		return fmt.Errorf("temporal namespace client on %s: %w", addr, err)
	}
	defer nc.Close()
	for {
		err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace:                        temporalNamespace,
			WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if err == nil || errors.As(err, &exists) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("register namespace %s: %w (last: %v)", temporalNamespace, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func openTemporal(ctx context.Context, addr string, steps int) (*temporalSystem, error) {
	c, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: temporalNamespace, Logger: temporalLogger()})
	if err != nil {
		return nil, fmt.Errorf("dial temporal at %s: %w", addr, err)
	}
	w := worker.New(c, temporalQueue, worker.Options{})
	w.RegisterWorkflow(EchoWorkflow)
	w.RegisterActivity(Echo)
	if err := w.Start(); err != nil {
		c.Close()
		return nil, fmt.Errorf("start temporal worker: %w", err)
	}
	return &temporalSystem{c: c, w: w, steps: steps}, nil
}

// run starts one workflow and waits for its result. A namespace the server
// has registered but not yet loaded answers NotFound for a few seconds: the
// warm-up runs retry that.
func (s *temporalSystem) run(ctx context.Context, i int) error {
	run, err := s.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        fmt.Sprintf("peers-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), i),
		TaskQueue: temporalQueue,
	}, EchoWorkflow, s.steps)
	if err != nil {
		return fmt.Errorf("start temporal workflow: %w", err)
	}
	var out string
	if err := run.Get(ctx, &out); err != nil {
		return fmt.Errorf("temporal workflow %s: %w", run.GetID(), err)
	}
	if want := fmt.Sprintf("call %d", s.steps-1); out != want {
		return fmt.Errorf("temporal workflow %s: result %q, want %q", run.GetID(), out, want)
	}
	return nil
}

func (s *temporalSystem) close() {
	s.w.Stop()
	s.c.Close()
}
