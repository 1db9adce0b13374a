package hostconfig

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/engine"
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/policy"
)

// lockedBuffer is a log destination the host's goroutines write at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSubmittedElsewhere: a task submitted by one host (engine submit) and
// run by another (engine serve), whose in-process observers never see its
// TaskCreated, counts its decisions under its agent and logs no warning.
// Before, the decisions were counted under agent="unknown" and the audit
// warned "audited records missing from the feed" for every such task, in
// normal use.
func TestSubmittedElsewhere(t *testing.T) {
	t.Parallel()
	data, ws := t.TempDir(), t.TempDir()
	submitter, err := Open(t.Context(), Options{DataDir: data, Config: exampleConfig(t), Name: "submit"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := submitter.Submit(t.Context(), task(t, "agent: helper\ngoal: g\nscript:\n  - tool_calls: [{tool: echo, args: {text: hi}}]\n  - finish: {answer: done}\n"))
	if err != nil {
		t.Fatal(err)
	}
	submitter.Close()

	cfg := exampleConfig(t)
	cfg.Observers.Audit = &config.Audit{File: filepath.Join(t.TempDir(), "audit.jsonl")}
	var logs lockedBuffer
	// The script's decisions, as a model's: a scripted turn is no model
	// call, and the metrics count model calls by agent.
	var h *Host
	asModel := func(ctx context.Context, st *engine.State) (engine.Policy, error) {
		p, err := engine.ScriptedPolicies(h.Backend().Content(), policy.ParseScripted)(ctx, st)
		return modelLike{p}, err
	}
	h, err = Open(t.Context(), Options{DataDir: data, Config: cfg, Workers: 1, Workspace: ws, Name: "serve", ServesHTTP: true,
		Policies: asModel, Deferred: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	rest, err := h.Wait(t.Context(), id)
	if err != nil || rest.Status != host.RestCompleted {
		t.Fatalf("the task: %+v, %v", rest, err)
	}
	// The in-process observers run behind the task: the decision of its
	// last turn is counted when they reach it.
	agents := func() []string {
		mfs, err := h.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var agents []string
		for _, mf := range mfs {
			if mf.GetName() != "noeta_gen_ai_calls_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "gen_ai_agent_name" {
						agents = append(agents, fmt.Sprintf("%s=%v", l.GetValue(), m.GetCounter().GetValue()))
					}
				}
			}
		}
		return agents
	}
	var got []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if got = agents(); len(got) > 0 && strings.HasSuffix(got[len(got)-1], "=2") || time.Now().After(deadline) {
			break
		}
	}
	h.Close() // every observer has had every record
	if len(got) != 1 || got[0] != "helper=2" {
		t.Errorf("noeta_gen_ai_calls_total by agent %v, want [helper=2] (two turns)", got)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("normal use logged a warning:\n%s", logs.String())
	}
}

// modelLike decides as p and says a model did: provider "test", model
// "scripted".
type modelLike struct{ p engine.Policy }

func (m modelLike) Decide(ctx context.Context, in noeta.PolicyInput) (noeta.Decision, error) {
	d, err := m.p.Decide(ctx, in)
	d.Provider, d.Model = "test", "scripted"
	return d, err
}
