package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/observers"
)

func TestAuditVerify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	sink, err := observers.NewAuditFileSink(observers.AuditFileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	a, err := observers.NewAudit(observers.AuditConfig{Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []noeta.Payload{
		noeta.TaskCreated{TaskID: "T", Agent: "a", Goal: "g", RootTaskID: "T"},
		noeta.TurnStarted{Turn: 1},
		noeta.ToolCallDenied{CallID: "call-1-0", Tool: "shell", Guard: "rules", Reason: "destructive"},
	} {
		env, err := eventlog.NewEnvelope("T", eventlog.OriginEngine, "w", p)
		if err != nil {
			t.Fatal(err)
		}
		env.Seq, env.Time, env.ID = uint64(i+1), time.Now(), noeta.NewID()
		if err := a.Observe(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errb := runCmd(t, "audit", "verify", path)
	if code != 0 || !strings.HasPrefix(out, "ok:") {
		t.Fatalf("verify of a good file: exit %d\n%s%s", code, out, errb)
	}
	b, _ := os.ReadFile(path)
	tampered := strings.Replace(string(b), "destructive", "harmless!!!", 1)
	if err := os.WriteFile(path, []byte(tampered), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCmd(t, "audit", "verify", path)
	if code != 1 || !strings.Contains(out, "broken at line 3") {
		t.Errorf("verify of a tampered file: exit %d\n%s", code, out)
	}
	if code, _, errb := runCmd(t, "audit", "verify", filepath.Join(t.TempDir(), "none.jsonl")); code != 2 || !strings.Contains(errb, "none.jsonl") {
		t.Errorf("verify of a missing file: exit %d %s", code, errb)
	}
}
