package jetstream

import (
	"strconv"
	"strings"

	"github.com/noeta-go/noeta"
)

// Partitions is noeta.Partitions.
const Partitions = noeta.Partitions

// Partition is noeta.Partition.
func Partition(task string) int { return noeta.Partition(task) }

// subjects builds the subject names of one prefix.
type subjects struct{ prefix string }

func (s subjects) taskRoot(task string) string {
	return s.prefix + ".t." + strconv.Itoa(Partition(task)) + "." + task
}

func (s subjects) log(task string) string { return s.taskRoot(task) + ".log" }

func (s subjects) inbox(task, key string) string { return s.taskRoot(task) + ".in." + key }

func (s subjects) inboxAll(task string) string { return s.taskRoot(task) + ".in.*" }

func (s subjects) allLogs() string { return s.prefix + ".t.*.*.log" }

func (s subjects) streamFilter() string { return s.prefix + ".t.>" }

// content is the subject of the body whose sha256 is hash (64 hex digits).
func (s subjects) content(hash string) string { return s.prefix + ".content." + hash }

func (s subjects) contentFilter() string { return s.prefix + ".content.>" }

// taskOfLog returns the task id of a log subject.
func (s subjects) taskOfLog(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.prefix+".t.")
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || parts[2] != "log" {
		return "", false
	}
	return parts[1], true
}
