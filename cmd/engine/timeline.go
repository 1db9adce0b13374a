package main

import (
	"github.com/noeta-go/noeta/host"
	"github.com/noeta-go/noeta/timeline"
)

// parseApprovalMode reads --approvals.
func parseApprovalMode(s string) (timeline.Mode, error) {
	m, err := timeline.ParseMode(s)
	if err != nil {
		return "", usageErr("%v", err)
	}
	return m, nil
}

// restCode is the exit code of a tree's rest.
func restCode(r host.Rest) int {
	switch r.Status {
	case host.RestCompleted:
		return exitDone
	case host.RestWaiting:
		return exitWaiting
	}
	return exitFailed
}
