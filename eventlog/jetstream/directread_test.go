package jetstream_test

import (
	"testing"

	"github.com/noeta-go/noeta/eventlog/jetstream"
)

// TestReadModeFollowsReplicas: a Log whose task stream has one copy reads
// a task's records by direct gets and creates no consumer (its one server
// is its leader; ADR 0103); a Log on a replicated stream keeps its ordered
// consumers. The JetStream API requests each Read sends are seen by a
// second subscriber on their subjects.
func TestReadModeFollowsReplicas(t *testing.T) {
	for _, tc := range []struct {
		name     string
		url      string
		replicas int
		direct   bool
	}{
		{"one copy", singleURL, 1, true},
		{"three copies", clusterURL, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := jetstream.Config{Prefix: "readmode-" + map[bool]string{true: "direct", false: "consumer"}[tc.direct]}
			l := openLog(t, tc.url, tc.replicas, cfg)
			task := create(t, l)
			stream := jetstream.StreamConfig(cfg).Name

			spy := connect(t, tc.url)
			creates, err := spy.SubscribeSync("$JS.API.CONSUMER.CREATE." + stream + ".>")
			if err != nil {
				t.Fatal(err)
			}
			gets, err := spy.SubscribeSync("$JS.API.DIRECT.GET." + stream)
			if err != nil {
				t.Fatal(err)
			}
			if err := spy.Flush(); err != nil {
				t.Fatal(err)
			}
			got, err := l.Read(t.Context(), task, 0)
			if err != nil || len(got) != 1 {
				t.Fatalf("Read: %v %v", got, err)
			}
			// The Read's requests were answered, so the server has routed
			// them; the flush's answer comes after them on this connection.
			if err := spy.Flush(); err != nil {
				t.Fatal(err)
			}
			nc, _, _ := creates.Pending()
			nd, _, _ := gets.Pending()
			if tc.direct && (nc != 0 || nd == 0) {
				t.Errorf("a Log on a stream of one copy sent %d consumer creates and %d direct gets; want none and some", nc, nd)
			}
			if !tc.direct && (nc == 0 || nd != 0) {
				t.Errorf("a Log on a replicated stream sent %d consumer creates and %d direct gets; want some and none", nc, nd)
			}
		})
	}
}
