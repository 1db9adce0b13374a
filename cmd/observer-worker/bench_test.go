package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
	"github.com/noeta-go/noeta/eventlog/memlog"
	"github.com/noeta-go/noeta/observers"
)

// BenchmarkAuditWorker: how many records a second one worker audits, from
// the feed to a file (fsync every second). The records are written first
// (64 tasks, b.N records in all); the clock runs while one durable audit
// consumer over all 64 partitions drains them.
func BenchmarkAuditWorker(b *testing.B) {
	ctx := context.Background()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	prefix := fmt.Sprintf("ab%d", time.Now().UnixNano()%1_000_000)
	reg, _ := memlog.New(memlog.Options{LeaseTTL: time.Hour})
	defer reg.Close()
	log, err := jetstream.Open(ctx, nc, jetstream.Config{Prefix: prefix, Registry: reg})
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	const tasks = 64
	per := max(b.N/tasks, 1)
	var wg sync.WaitGroup
	for range tasks {
		wg.Go(func() {
			task := noeta.NewTaskID()
			env, _ := eventlog.NewEnvelope(task, eventlog.OriginSystem, "bench", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
			if _, err := log.Create(ctx, env); err != nil {
				b.Error(err)
				return
			}
			_ = reg.Enqueue(ctx, task, eventlog.EnqueueOptions{})
			l, err := reg.Lease(ctx, eventlog.LeaseRequest{Worker: "w", Task: task})
			if err != nil {
				b.Error(err)
				return
			}
			for i := range per - 2 {
				env, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "w", noeta.TurnStarted{Turn: i + 1})
				if _, err := log.Emit(ctx, l, env, eventlog.EmitOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := uint64(tasks * per)
	feed, err := jetstream.OpenFeed(ctx, nc, jetstream.FeedOptions{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	sink, err := observers.NewAuditFileSink(observers.AuditFileConfig{Path: filepath.Join(b.TempDir(), "audit.jsonl"), SyncEvery: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	audit, err := observers.NewAudit(observers.AuditConfig{Sink: sink})
	if err != nil {
		b.Fatal(err)
	}
	defer audit.Close()
	d, err := observers.NewDurable(feed, observers.DurableConfig{}, audit)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ResetTimer()
	go func() { done <- d.Run(runCtx) }()
	for audit.Stats().Written < total {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "records/s")
}
