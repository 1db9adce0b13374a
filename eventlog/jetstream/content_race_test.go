package jetstream_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestContentConcurrentPutsOfOneBody: processes that store the same body at
// once each write it (Put checks, then writes), and the later write removes
// the earlier one's chunks. A Get between them read a version whose chunks
// went away and failed with "digests do not match", though the body was
// stored whole; every version is the same bytes, so Get reads again.
func TestContentConcurrentPutsOfOneBody(t *testing.T) {
	prefix := freshPrefix("cput")
	logs := make([]*jetstream.Log, 3)
	for i := range logs {
		logs[i] = openLog(t, singleURL, 1, jetstream.Config{Prefix: prefix})
	}
	for round := range 12 {
		// Over a message's largest payload, so the body goes to the object
		// store (a smaller one is one message on the content stream).
		body := bytes.Repeat([]byte(fmt.Sprintf("round %02d ", round)), 128*1024)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Go(func() {
				l := logs[i%len(logs)]
				ref, err := l.Put(t.Context(), body, "text/plain")
				if err != nil {
					t.Errorf("round %d: Put: %v", round, err)
					return
				}
				for range 3 {
					got, err := l.Get(t.Context(), ref)
					if err != nil {
						t.Errorf("round %d: Get while others store the same body: %v", round, err)
						return
					}
					if !bytes.Equal(got, body) {
						t.Errorf("round %d: Get returned %d other bytes", round, len(got))
						return
					}
				}
			})
		}
		wg.Wait()
	}
}
