package memlog_test

import (
	"testing"

	"github.com/noeta-go/noeta/eventlog"
	"github.com/noeta-go/noeta/eventlog/eventlogtest"
	"github.com/noeta-go/noeta/eventlog/memlog"
)

func TestWaitingSuite(t *testing.T) {
	eventlogtest.RunWaitingSuite(t, func(*testing.T) eventlog.WaitingIndex { return memlog.NewWaitingIndex() })
}
