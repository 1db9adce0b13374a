package policy

import (
	"context"
	"fmt"

	"github.com/noeta-go/noeta/internal/boundedio"
)

// MaxTaskFileSize is the largest task file read or parsed: 1 MiB. It bounds
// the memory a hostile file can cost, since the YAML parser builds the whole
// node tree before anything is checked (measured: under 160 MB at 1 MiB for
// the worst shapes, a flow list of one-character items or of empty maps).
const MaxTaskFileSize = 1 << 20

// TaskFile is a task file (DESIGN.md §7): the agent to run, its goal, and the
// scripted decisions it will propose, turn by turn.
//
//	agent: researcher
//	goal: "Summarise the repository"
//	script:
//	  - tool_calls: [{tool: read_file, args: {path: README.md}}, {tool: shell, args: {command: "ls"}}]
//	  - spawn: [{agent: helper, goal: "count lines", script: [{finish: {answer: "42"}}]}]
//	  - finish: {answer: "done"}
//	    cost_usd: 0.25
//
// The other kinds of step, as a script holds them:
//
//	script:
//	  - yield_for_human: {question: "Deploy to production?"}
//	  - wait_timer: {seconds: 30}
//	  - wait_external: {event_kind: build_finished}
//	  - state_patch: {stage: review}
//	  - fail: {error: "the build is red"}
//	    input_tokens: 1200
//	    output_tokens: 300
type TaskFile struct {
	// Agent is the agent of noeta.yaml that runs the task.
	Agent string
	// Goal is the task's goal, as the agent is given it.
	Goal string
	// Script is the decisions the agent proposes, one step per turn; a
	// turn past its end fails the task ("script exhausted at turn N").
	Script Script
	// Scripted is false for a task file without script:, whose agent's
	// model decides each turn.
	Scripted bool
}

// LoadTaskFile is [LoadTaskFileContext] with a context that never ends.
func LoadTaskFile(path string) (TaskFile, error) {
	return LoadTaskFileContext(context.Background(), path)
}

// LoadTaskFileContext reads and checks the task file at path; errors name
// the file as path. It must be a regular file of at most [MaxTaskFileSize]
// bytes: a directory, a FIFO or a device is refused without being read, and
// the read ends when ctx does.
func LoadTaskFileContext(ctx context.Context, path string) (TaskFile, error) {
	data, err := boundedio.ReadFile(ctx, path, MaxTaskFileSize)
	if err != nil {
		return TaskFile{}, err
	}
	return ParseTaskFile(path, data)
}

// ParseTaskFile reads a task file's YAML. name is the file's name in errors.
//
// A script step is one decision, a mapping with exactly one of:
//
//	tool_calls: [{tool, args}]          args a mapping; absent means {}
//	spawn: [{agent, goal, script}]      two or more members make a fan-out group;
//	                                    script is the child's own, checked the same way
//	                                    (absent: the child fails at its first turn)
//	yield_for_human: {question}
//	wait_timer: {seconds}               a number >= 0
//	wait_external: {event_kind}
//	state_patch: {…}                    the mapping is the patch
//	finish: {answer}                    any YAML value that is JSON (null too)
//	fail: {error}
//
// and optionally what deciding it cost, which PolicyDecided records and the
// budget reads:
//
//	cost_usd: N                         a number >= 0, in USD
//	input_tokens: N                     an integer >= 0
//	output_tokens: N                    an integer >= 0
//
// Reading is strict, because a task file drives governance tests and a
// misread one tests the wrong thing: an unknown key at any level, a step with
// no kind or two, a value of the wrong type, an empty required string, a
// negative number, a mapping key that is not a string (YAML allows 1: or
// true: as keys; JSON does not), a merge key (<<), a non-finite number or an
// unknown tag, a duplicate key and a second YAML document are errors. Each is
// a [*TaskFileError] naming the file, the line and the path of the field —
// task.yaml:7: script[2].tool_calls[0].args: must be a mapping, not a string —
// and all of them are returned, joined.
//
// Args, patches and answers become canonical JSON ([noeta.CanonicalizeJSON]):
// YAML strings, integers (every digit kept, however long), floats, booleans
// and null map to their JSON counterparts; a date or base64 value stays the
// text written. Aliases are followed, within limits on the size and depth of
// the expanded document. data over [MaxTaskFileSize] bytes is refused before
// it is parsed.
func ParseTaskFile(name string, data []byte) (TaskFile, error) {
	if len(data) > MaxTaskFileSize {
		return TaskFile{}, fmt.Errorf("%s: %w: %d bytes, over the limit of %s", name, boundedio.ErrTooLarge, len(data), boundedio.Size(MaxTaskFileSize))
	}
	errs := &errorList{file: name}
	root := parseYAML(data, errs)
	if root == nil {
		// A syntax error, or the limits: there is no tree to check.
		return TaskFile{}, errs.err()
	}
	c := &checker{errs: errs}
	tf := c.taskFile(root)
	if err := errs.err(); err != nil {
		return TaskFile{}, err
	}
	return tf, nil
}
