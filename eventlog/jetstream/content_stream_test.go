package jetstream_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// contentRig is a Log on a fresh prefix and a JetStream client to look at
// what it stored.
func contentRig(t *testing.T, url string, replicas int) (*jetstream.Log, natsjs.JetStream, string) {
	t.Helper()
	prefix := freshPrefix("cstr")
	l := openLog(t, url, replicas, jetstream.Config{Prefix: prefix})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return l, js, prefix
}

func contentStreamOf(prefix string) string { return strings.ToUpper(prefix) + "_CONTENT" }

// objectsOf is the object store of prefix's content.
func objectsOf(ctx context.Context, t *testing.T, js natsjs.JetStream, prefix string) natsjs.ObjectStore {
	t.Helper()
	obs, err := js.ObjectStore(ctx, prefix+"_content")
	if err != nil {
		t.Fatal(err)
	}
	return obs
}

// onOneAndThreeCopies runs f on the single node and on the 3-node cluster.
func onOneAndThreeCopies(t *testing.T, f func(t *testing.T, url string, replicas int)) {
	for _, tc := range []struct {
		name     string
		url      string
		replicas int
	}{{"single", singleURL, 1}, {"cluster", clusterURL, 3}} {
		t.Run(tc.name, func(t *testing.T) { f(t, tc.url, tc.replicas) })
	}
}

// A body that fits a message is one message on the content stream, on the
// subject its hash names, and nothing in the object store; a second Put of
// it writes nothing; Get reads it back.
func TestContentStreamHoldsABodyOnce(t *testing.T) {
	onOneAndThreeCopies(t, func(t *testing.T, url string, replicas int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		l, js, prefix := contentRig(t, url, replicas)
		body := []byte(`{"state":"a snapshot"}`)
		ref, err := l.Put(ctx, body, eventlog.MediaTypeJSON)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Put(ctx, body, eventlog.MediaTypeJSON); err != nil {
			t.Fatalf("the same body again: %v", err)
		}
		if n := streamMsgs(t, js, contentStreamOf(prefix)); n != 1 {
			t.Errorf("content stream holds %d messages after two Puts of one body, want 1", n)
		}
		st, err := js.Stream(ctx, contentStreamOf(prefix))
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, prefix+".content."+ref.Hash)
		if err != nil {
			t.Fatalf("the body's subject: %v", err)
		}
		if !bytes.Equal(m.Data, body) {
			t.Fatalf("the body's subject holds %q", m.Data)
		}
		obs := objectsOf(ctx, t, js, prefix)
		if _, err := obs.GetInfo(ctx, ref.Hash); !errors.Is(err, natsjs.ErrObjectNotFound) {
			t.Errorf("object store has the body too: %v", err)
		}
		got, err := l.Get(ctx, ref)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("Get: %q, %v", got, err)
		}
		many, err := l.GetMany(ctx, []noeta.ContentRef{ref, noeta.RefFor([]byte("never stored"), "text/plain")})
		if err != nil || len(many) != 1 || !bytes.Equal(many[ref.Hash], body) {
			t.Fatalf("GetMany: %v, %v", many, err)
		}
	})
}

// A body over a message's largest payload goes to the object store, and a
// body stored in the object store before the content stream existed is
// still read.
func TestContentStreamFallsBackToTheObjectStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, js, prefix := contentRig(t, singleURL, 1)
	big := bytes.Repeat([]byte("0123456789abcdef"), 80*1024) // 1.25 MiB
	ref, err := l.Put(ctx, big, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	obs := objectsOf(ctx, t, js, prefix)
	if _, err := obs.GetInfo(ctx, ref.Hash); err != nil {
		t.Fatalf("a large body is not in the object store: %v", err)
	}
	if got, err := l.Get(ctx, ref); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("Get of a large body: %d bytes, %v", len(got), err)
	}

	old := []byte("stored by an engine before the content stream")
	oldRef := noeta.RefFor(old, "text/plain")
	if _, err := obs.PutBytes(ctx, oldRef.Hash, old); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Get(ctx, oldRef); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("Get of a body in the object store: %q, %v", got, err)
	}
	if _, err := l.Get(ctx, noeta.RefFor([]byte("nowhere"), "text/plain")); !errors.Is(err, eventlog.ErrNotFound) {
		t.Fatalf("Get of a body stored nowhere: %v, want ErrNotFound", err)
	}
}

// A message on a body's subject that is not the body (written by hand, or
// damaged) is never handed out as the body, and never taken for it: Put
// stores the body in the object store, where Get then finds it.
func TestContentStreamRefusesABodyThatIsNotItsHash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, js, prefix := contentRig(t, singleURL, 1)
	body := []byte("the real body")
	ref := noeta.RefFor(body, "text/plain")
	if _, err := js.Publish(ctx, prefix+".content."+ref.Hash, []byte("something else")); err != nil {
		t.Fatal(err)
	}
	got, err := l.Get(ctx, ref)
	if err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("Get of a damaged body: %q, %v; want an error naming the hash", got, err)
	}
	// The stream refuses a second message on the subject even without the
	// compare-and-set.
	if _, err := js.Publish(ctx, prefix+".content."+ref.Hash, body); err == nil {
		t.Fatal("a second message on a body's subject was stored")
	}
	if _, err := l.Put(ctx, body, "text/plain"); err != nil {
		t.Fatalf("Put of a body whose subject holds other bytes: %v", err)
	}
	obs := objectsOf(ctx, t, js, prefix)
	if _, err := obs.GetInfo(ctx, ref.Hash); err != nil {
		t.Fatalf("Put reported the body stored, and it is not in the object store: %v", err)
	}
	if got, err := l.Get(ctx, ref); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Get after the body went to the object store: %q, %v", got, err)
	}
}

// Puts of one small body at once, from several Logs, on one copy and on
// three (where a write of the same subject in flight is refused with 10164
// and waited out): each succeeds, the stream holds it once, every Get
// reads it.
func TestContentStreamConcurrentPutsOfOneBody(t *testing.T) {
	onOneAndThreeCopies(t, func(t *testing.T, url string, replicas int) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		l, js, prefix := contentRig(t, url, replicas)
		logs := []*jetstream.Log{l, openLog(t, url, replicas, jetstream.Config{Prefix: prefix}), openLog(t, url, replicas, jetstream.Config{Prefix: prefix})}
		for round := range 8 {
			body := []byte(strings.Repeat("round "+string(rune('a'+round))+" ", 200))
			var wg sync.WaitGroup
			for i := range 6 {
				wg.Go(func() {
					lg := logs[i%len(logs)]
					ref, err := lg.Put(ctx, body, "text/plain")
					if err != nil {
						t.Errorf("round %d: Put: %v", round, err)
						return
					}
					if got, err := lg.Get(ctx, ref); err != nil || !bytes.Equal(got, body) {
						t.Errorf("round %d: Get: %d bytes, %v", round, len(got), err)
					}
				})
			}
			wg.Wait()
		}
		if n := streamMsgs(t, js, contentStreamOf(prefix)); n != 8 {
			t.Errorf("content stream holds %d messages for 8 bodies", n)
		}
	})
}

// A Reader reads bodies from the content stream, and from the object store
// on a store whose content stream no engine has made yet.
func TestReaderReadsTheContentStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, js, prefix := contentRig(t, singleURL, 1)
	body := []byte("read by a reader")
	ref, err := l.Put(ctx, body, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(singleURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r, err := jetstream.OpenReader(ctx, nc, jetstream.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.Get(ctx, ref); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("Reader.Get: %q, %v", got, err)
	}

	// The stream gone (a store no engine of this version opened): the
	// object store still answers; a Reader that found no stream finds it
	// once an engine has made it.
	obs := objectsOf(ctx, t, js, prefix)
	old := []byte("only in the object store")
	oldRef := noeta.RefFor(old, "text/plain")
	if _, err := obs.PutBytes(ctx, oldRef.Hash, old); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, contentStreamOf(prefix)); err != nil {
		t.Fatal(err)
	}
	r2, err := jetstream.OpenReader(ctx, nc, jetstream.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if got, err := r2.Get(ctx, oldRef); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("Reader.Get without the content stream: %q, %v", got, err)
	}
	l2 := openLog(t, singleURL, 1, jetstream.Config{Prefix: prefix})
	fresh := []byte("stored once the stream is back")
	freshRef, err := l2.Put(ctx, fresh, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r2.Get(ctx, freshRef); err != nil || !bytes.Equal(got, fresh) {
		t.Fatalf("Reader.Get once an engine made the stream: %q, %v", got, err)
	}
}
