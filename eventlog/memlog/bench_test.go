package memlog_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

// payload200 is a canonical 200-byte object, the size of a typical tool-call
// record; payload200Unsorted is the same object with its keys out of order.
var payload200, payload200Unsorted = func() ([]byte, []byte) {
	const head = `{"args":{"path":"README.md"},"call_id":"01JDX3K5V7Q9R2T4W6Y8Z0A1B3","note":"`
	const tail = `","tool":"read_file","turn":3}`
	pad := strings.Repeat("x", 200-len(head)-len(tail))
	unsorted := `{"turn":3,"tool":"read_file","note":"` + pad + `","call_id":"01JDX3K5V7Q9R2T4W6Y8Z0A1B3","args":{"path":"README.md"}}`
	return []byte(head + pad + tail), []byte(unsorted)
}()

// newLeased returns a store with one created, leased task.
func newLeased(b *testing.B) (*memlog.Store, eventlog.Lease) {
	b.Helper()
	ctx := context.Background()
	s, err := memlog.New(memlog.Options{LeaseTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	task := noeta.NewTaskID()
	env, err := eventlog.NewEnvelope(task, eventlog.OriginEngine, "bench", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Create(ctx, env); err != nil {
		b.Fatal(err)
	}
	if err := s.Enqueue(ctx, task, eventlog.EnqueueOptions{}); err != nil {
		b.Fatal(err)
	}
	lease, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "bench", Task: task})
	if err != nil {
		b.Fatal(err)
	}
	return s, lease
}

// BenchmarkEmit measures a fenced Emit of a 200-byte payload. Logs are
// replaced every 50,000 records so that the figure is the append, not the
// growth of one huge slice and the GC work it causes.
func BenchmarkEmit(b *testing.B) {
	cases := []struct {
		name    string
		subs    int
		payload []byte
	}{
		{"subscribers=0", 0, payload200},
		{"subscribers=1", 1, payload200},
		{"subscribers=4", 4, payload200},
		{"subscribers=0/unsorted-payload", 0, payload200Unsorted},
	}
	for _, c := range cases {
		subs := c.subs
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			var s *memlog.Store
			var lease eventlog.Lease
			fresh := func() {
				if s != nil {
					_ = s.Close()
				}
				s, lease = newLeased(b)
				for range subs {
					s.Subscribe(func(context.Context, eventlog.Envelope) error { return nil })
				}
			}
			fresh()
			env := eventlog.Envelope{Type: noeta.TypeToolCallStarted, Origin: eventlog.OriginEngine, Actor: "engine", Payload: c.payload}
			b.SetBytes(int64(len(c.payload)))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if n == 50_000 {
					b.StopTimer()
					fresh()
					n = 0
					b.StartTimer()
				}
				if _, err := s.Emit(ctx, lease, env, eventlog.EmitOptions{}); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.StopTimer()
			_ = s.Close()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkEmitParallel measures many goroutines, each appending to its own
// task: the writer lock is per task, so this should scale with cores.
func BenchmarkEmitParallel(b *testing.B) {
	ctx := context.Background()
	s, err := memlog.New(memlog.Options{LeaseTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	env := eventlog.Envelope{Type: noeta.TypeToolCallStarted, Origin: eventlog.OriginEngine, Actor: "engine", Payload: payload200}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		task := noeta.NewTaskID()
		c, _ := eventlog.NewEnvelope(task, eventlog.OriginEngine, "bench", noeta.TaskCreated{TaskID: task, Agent: "a", Goal: "g", RootTaskID: task})
		if _, err := s.Create(ctx, c); err != nil {
			b.Error(err)
			return
		}
		_ = s.Enqueue(ctx, task, eventlog.EnqueueOptions{})
		lease, err := s.Lease(ctx, eventlog.LeaseRequest{Worker: "bench", Task: task})
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if _, err := s.Emit(ctx, lease, env, eventlog.EmitOptions{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
