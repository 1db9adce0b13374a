package jetstream_test

// BenchmarkBatchMechanism measures what the ways of writing k records of one
// task with fewer durable waits cost on this machine, each against k
// sequential compare-and-set publishes on the same server (ADR 0038):
//
//   - seq: k publishes, each with Nats-Expected-Last-Subject-Sequence,
//     each awaited before the next (what Emit does today);
//   - atomic: one JetStream atomic batch (Nats-Batch-*), the first message
//     carrying the compare-and-set, one reply awaited;
//   - pipelined: k publishes sent together, each carrying the
//     compare-and-set on the sequence its predecessor will get (known here
//     because nothing else writes the probe stream), the acks awaited
//     together;
//   - packed: one message holding the k records (ADR 0040), with the
//     compare-and-set, awaited.
//
// ns/op is per k records; ns/record divides it by k.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
)

func BenchmarkBatchMechanism(b *testing.B) {
	targets := []benchTarget{{name: "R1-sync=always", url: singleURL, replicas: 1}, {name: "R3", url: clusterURL, replicas: 3}}
	for _, tg := range targets {
		for _, k := range []int{2, 4} {
			for _, mech := range []string{"seq", "atomic", "packed", "pipelined", "pipelined-inbox"} {
				if strings.HasPrefix(mech, "pipelined") && tg.replicas > 1 {
					continue // R3 refuses the second in-flight compare-and-set (10164)
				}
				b.Run(fmt.Sprintf("%s/k=%d/%s", tg.name, k, mech), func(b *testing.B) {
					benchMechanism(b, tg, k, mech)
				})
			}
		}
	}
}

func benchMechanism(b *testing.B, tg benchTarget, k int, mech string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nc := connect(b, tg.url)
	js, err := natsjs.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	name := "PROBE_" + noeta.NewTaskID()
	var st natsjs.Stream
	for {
		st, err = js.CreateStream(ctx, natsjs.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: natsjs.FileStorage, Replicas: tg.replicas, AllowAtomicPublish: true})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			b.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	_ = st
	subj := name + ".t.1.x.log"
	body := make([]byte, 600)
	for i := range body {
		body[i] = 'a'
	}
	// k records in one JSON array, as a pack is.
	packBody := []byte{'['}
	for i := range k {
		if i > 0 {
			packBody = append(packBody, ',')
		}
		packBody = append(packBody, '"')
		packBody = append(packBody, body[:len(body)-2]...)
		packBody = append(packBody, '"')
	}
	packBody = append(packBody, ']')
	var last uint64
	mk := func() *nats.Msg {
		m := nats.NewMsg(subj)
		m.Data = body
		m.Header.Set(nats.MsgIdHdr, noeta.NewID())
		return m
	}
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox + ".*")
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	for b.Loop() {
		switch mech {
		case "pipelined-inbox":
			for i := range k {
				m := mk()
				m.Reply = inbox + "." + strconv.Itoa(i)
				m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(last+uint64(i), 10))
				if err := nc.PublishMsg(m); err != nil {
					b.Fatal(err)
				}
			}
			for range k {
				r, err := sub.NextMsgWithContext(ctx)
				if err != nil {
					b.Fatal(err)
				}
				var ack struct {
					Seq   uint64          `json:"seq"`
					Error json.RawMessage `json:"error"`
				}
				if err := json.Unmarshal(r.Data, &ack); err != nil || ack.Error != nil {
					b.Fatalf("%s %v", r.Data, err)
				}
				last = max(last, ack.Seq)
			}
		case "packed":
			m := mk()
			m.Data = packBody
			ack, err := js.PublishMsg(ctx, m, natsjs.WithExpectLastSequencePerSubject(last))
			if err != nil {
				b.Fatal(err)
			}
			last = ack.Sequence
		case "seq":
			for range k {
				ack, err := js.PublishMsg(ctx, mk(), natsjs.WithExpectLastSequencePerSubject(last))
				if err != nil {
					b.Fatal(err)
				}
				last = ack.Sequence
			}
		case "atomic":
			id := noeta.NewID()
			var reply *nats.Msg
			for i := 1; i <= k; i++ {
				m := mk()
				m.Header.Set("Nats-Batch-Id", id)
				m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i))
				if i == 1 {
					m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(last, 10))
				}
				if i < k {
					if err := nc.PublishMsg(m); err != nil {
						b.Fatal(err)
					}
					continue
				}
				m.Header.Set("Nats-Batch-Commit", "1")
				if reply, err = nc.RequestMsgWithContext(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			var ack struct {
				Seq   uint64 `json:"seq"`
				Error *struct {
					Code int    `json:"err_code"`
					Desc string `json:"description"`
				} `json:"error"`
			}
			if err := jsonUnmarshal(reply.Data, &ack); err != nil || ack.Error != nil {
				b.Fatalf("%s %v", reply.Data, err)
			}
			last = ack.Seq
		case "pipelined":
			futs := make([]natsjs.PubAckFuture, k)
			for i := range k {
				f, err := js.PublishMsgAsync(mk(), natsjs.WithExpectLastSequencePerSubject(last+uint64(i)))
				if err != nil {
					b.Fatal(err)
				}
				futs[i] = f
			}
			for _, f := range futs {
				select {
				case ack := <-f.Ok():
					last = ack.Sequence
				case err := <-f.Err():
					b.Fatal(err)
				}
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/record")
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
