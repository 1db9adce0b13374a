package memlog_test

import (
	"testing"
	"time"

	"github.com/noeta-go/noeta/eventlog/eventlogtest"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

func factory(t *testing.T) eventlogtest.Backend {
	t.Helper()
	clock := memlog.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := memlog.New(memlog.Options{Clock: clock, LeaseTTL: 30 * time.Second, HeartbeatMax: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return backendOn(s, clock)
}

// backendOn is the suite's view of s. A restart reopens s: a new Store on
// the same memory, as a process restarted against a server.
func backendOn(s *memlog.Store, clock *memlog.ManualClock) eventlogtest.Backend {
	return eventlogtest.Backend{
		Log:             s,
		Dispatcher:      s,
		Content:         s,
		Close:           s.Close,
		Advance:         clock.Advance,
		LeaseTTL:        30 * time.Second,
		HeartbeatMax:    5,
		ReclaimMax:      memlog.DefaultReclaimMax,
		MaxFailAttempts: memlog.DefaultMaxFailAttempts,
		Restart: func(t *testing.T) eventlogtest.Backend {
			t.Helper()
			ns, err := s.Reopen()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ns.Close() })
			return backendOn(ns, clock)
		},
	}
}

func TestSuite(t *testing.T) { eventlogtest.RunSuite(t, factory) }
