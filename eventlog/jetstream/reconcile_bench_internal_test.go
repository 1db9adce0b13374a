package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/internal/dispatchrow"
	"github.com/noeta-go/noeta/eventlog/jetstream/embedded"
)

// BenchmarkReconcileIdle: one reconcile pass over a rows bucket of idle
// rows (a third ended, a third suspended on an external event, a third on
// a timer two days ahead, with its schedule). pass=whole reads every row
// at one pass (a Dispatcher without a loop of passes; every pass before
// ADR 0092, the hourly one before ADR 0110); pass=catch-up is a pass of a
// round catching up (a Dispatcher's first); pass=slice a pass of a round
// at the default pace (passes 15 s apart, a round an hour); pass=changes a
// pass with no round due and no row written since the pass before, and
// changes-1000 one with 1,000. cpu-ms/op is the process's CPU time, the
// Dispatcher's and the in-process server's, over the passes alone;
// rows-read/op the rows a pass read. The server is the test's own, with a
// sync interval of a minute: the rows are written straight into the
// bucket (what a pass reads is the same), a million of them in seconds.
// Sizes: NOETA_BENCH_IDLE_ROWS, comma-separated (default 1000,10000).
//
//	NOETA_BENCH_IDLE_ROWS=100000,1000000 go test -run '^$' -bench ReconcileIdle -benchtime 3x ./eventlog/jetstream/
func BenchmarkReconcileIdle(b *testing.B) {
	sizes := []int{1_000, 10_000}
	if env := os.Getenv("NOETA_BENCH_IDLE_ROWS"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("NOETA_BENCH_IDLE_ROWS: %q is not a positive count", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, rows := range sizes {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			ctx := context.Background()
			srv, err := embedded.Start(ctx, embedded.Config{Dir: b.TempDir(), SyncInterval: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(srv.Shutdown)
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(nc.Close)
			d, err := OpenDispatcher(ctx, nc, DispatcherConfig{SweepInterval: -1, LeaseTTL: time.Minute, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = d.Close() })
			loadIdleRows(b, nc, d, rows)
			if _, err := d.RequeueStale(ctx); err != nil {
				b.Fatal(err)
			}
			// No pass runs beside (SweepInterval < 0): the benchmark sets
			// the view and the pace between passes.
			for _, mode := range []string{"whole", "catch-up", "slice", "changes", "changes-1000"} {
				b.Run("pass="+mode, func(b *testing.B) {
					d.passGap = -1
					if mode != "whole" {
						d.passGap = DefaultSweepInterval
					}
					var cpu time.Duration
					read := d.Stats().RowsRead
					for b.Loop() {
						switch mode {
						case "whole", "catch-up":
							d.view.valid = false
						case "slice":
							d.view.round.done, d.view.round.began = true, time.Time{} // a round is due
						case "changes", "changes-1000":
							d.view.round.done, d.view.round.began = true, time.Now()
						}
						if mode == "changes-1000" {
							// 1,000 rows written since the pass before.
							b.StopTimer()
							loadIdleRows(b, nc, d, 1000)
							b.StartTimer()
						}
						c0 := cpuTime(b)
						// As the loop's pass (a slice), or on demand (whole).
						if _, _, err := d.pass(ctx, mode == "whole"); err != nil {
							b.Fatal(err)
						}
						cpu += cpuTime(b) - c0
					}
					b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
					b.ReportMetric(float64(d.Stats().RowsRead-read)/float64(b.N), "rows-read/op")
				})
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadIdleRows writes n idle rows straight into d's rows bucket.
func loadIdleRows(b testing.TB, nc *nats.Conn, d *Dispatcher, n int) {
	b.Helper()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	external := noeta.ExternalWake("never")
	later := noeta.TimerWake(time.Now().Add(48 * time.Hour))
	now := time.Now().UTC()
	for i := range n {
		r := taskRow{Row: dispatchrow.Row{Queue: "idle", ReadyEpoch: 1, Generation: 1, Worker: "w"}, Created: now, Op: noeta.NewID()}
		switch i % 3 {
		case 0:
			r.Status, r.Reason = eventlog.DispatchTerminal, "completed"
		case 1:
			r.Status, r.WakeOn = eventlog.DispatchSuspended, &external
		case 2:
			r.Status, r.WakeOn = eventlog.DispatchSuspended, &later
		}
		val, err := json.Marshal(&r)
		if err != nil {
			b.Fatal(err)
		}
		task := noeta.NewTaskID()
		if _, err := js.PublishAsync("$KV."+d.cfg.tasksBucket()+"."+task, val, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
		if r.WakeOn == &later {
			// Its schedule, as armTimer leaves it.
			m := nats.NewMsg(d.subj.timer(task, r.Generation))
			m.Header.Set(hdrTimerGen, strconv.FormatUint(r.Generation, 10))
			m.Header.Set(jetstream.MsgTTLHeader, "never")
			if m.Data, err = noeta.Canonical(later); err != nil {
				b.Fatal(err)
			}
			if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute),
				jetstream.WithScheduleAt(ceilSecond(later.FireAt)), jetstream.WithScheduleTarget(d.subj.timerTarget(task))); err != nil {
				b.Fatal(err)
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Minute):
		b.Fatal("the rows were not all acknowledged within 10 minutes")
	}
}
