package noeta

import "fmt"

// TaskStatus is where a task stands, as its fold derives it from the log.
type TaskStatus string

// The task statuses. A task is pending from TaskCreated until its first step,
// running while a worker steps it, suspended while it waits on a wake condition,
// and terminal after TaskCompleted, TaskFailed or TaskCancelled.
const (
	StatusPending   TaskStatus = "pending"
	StatusRunning   TaskStatus = "running"
	StatusSuspended TaskStatus = "suspended"
	StatusTerminal  TaskStatus = "terminal"
)

// Valid reports whether s is one of the four statuses.
func (s TaskStatus) Valid() bool {
	switch s {
	case StatusPending, StatusRunning, StatusSuspended, StatusTerminal:
		return true
	}
	return false
}

// UnmarshalText refuses anything but the four statuses.
func (s *TaskStatus) UnmarshalText(b []byte) error {
	v := TaskStatus(b)
	if !v.Valid() {
		return fmt.Errorf("noeta: unknown task status %q (want pending, running, suspended or terminal)", b)
	}
	*s = v
	return nil
}
