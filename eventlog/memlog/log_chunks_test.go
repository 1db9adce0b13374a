package memlog

import (
	"strconv"
	"testing"

	"github.com/noeta-go/noeta/eventlog"
)

// TestChunks pushes records across the small blocks and the full ones and
// reads each back, alone and from every point.
func TestChunks(t *testing.T) {
	var c chunks
	const n = 3*chunkLen + 7
	for i := range n {
		c.push(eventlog.Envelope{Seq: uint64(i + 1), Payload: []byte(strconv.Itoa(i + 1))})
	}
	for seq := uint64(1); seq <= n; seq++ {
		if got := c.at(seq); got.Seq != seq {
			t.Fatalf("at(%d) = seq %d", seq, got.Seq)
		}
	}
	for after := uint64(0); after <= n; after++ {
		out := c.from(after)
		if uint64(len(out)) != n-after {
			t.Fatalf("from(%d): %d records", after, len(out))
		}
		for i, env := range out {
			if want := after + uint64(i) + 1; env.Seq != want || string(env.Payload) != strconv.FormatUint(want, 10) {
				t.Fatalf("from(%d)[%d] = seq %d %s", after, i, env.Seq, env.Payload)
			}
		}
		want := after + 1
		for _, v := range c.views(after) {
			for _, env := range v {
				if env.Seq != want {
					t.Fatalf("views(%d): seq %d where %d was due", after, env.Seq, want)
				}
				want++
			}
		}
		if want != n+1 {
			t.Fatalf("views(%d) ended before seq %d", after, want)
		}
	}
	for i, b := range c.blocks[:len(c.blocks)-1] {
		if len(b) != cap(b) {
			t.Errorf("block %d holds %d of %d", i, len(b), cap(b))
		}
	}
}
