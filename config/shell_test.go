package config

import (
	"strings"
	"testing"
)

// TestMatchShellConfigErrors: the load errors of match_shell, each naming
// the field and its line.
func TestMatchShellConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "rules:\n  - match_tool: shell\n    action: deny\n    match_shell: {path: command, program: rm, flags: [force]}\n",
			"rules[0].match_shell.flags: unknown key (known: path, program, flags_all, flags_any) (line 4)"},
		{"no path", "rules:\n  - {match_tool: shell, action: deny, match_shell: {program: rm}}\n", "rules[0].match_shell.path: required"},
		{"no program", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command}}\n", "rules[0].match_shell.program: required"},
		{"empty program list", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: []}}\n", "rules[0].match_shell.program: required"},
		{"program with a directory", "rules:\n  - match_tool: shell\n    action: deny\n    match_shell: {path: command, program: [rm, /bin/rm]}\n",
			`rules[0].match_shell.program[1]: must be a program's name without a directory (rm, not /bin/rm), not "/bin/rm" (line 4)`},
		{"program not a string", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: 5}}\n", "rules[0].match_shell.program: must be a string, not an integer"},
		{"unknown flag name", "rules:\n  - match_tool: shell\n    action: deny\n    match_shell:\n      path: command\n      program: rm\n      flags_all: [force, recurse]\n",
			`rules[0].match_shell.flags_all[1]: "recurse" is not a flag rm is known to have (known: dir, force, interactive, no-preserve-root, recursive); spell it out, e.g. [-x, --recurse] (line 7)`},
		{"flag name without a table", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: tar, flags_all: [recursive]}}\n",
			`rules[0].match_shell.flags_all[0]: "recursive" is not a flag tar is known to have (it has no flag table)`},
		{"flag name one program lacks", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: [rm, mv], flags_all: [recursive]}}\n",
			`rules[0].match_shell.flags_all[0]: "recursive" is not a flag mv is known to have`},
		{"bad spelling", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: x, flags_any: [\"-\"]}}\n",
			`rules[0].match_shell.flags_any[0]: "-" is not a flag (-x, --name or -name)`},
		{"bad spelling reported once", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: [x, y], flags_any: [\"-\"]}}\n",
			`rules[0].match_shell.flags_any[0]: "-" is not a flag (-x, --name or -name) (line 2)`},
		{"long spelling with a value", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: x, flags_any: [--a=b]}}\n",
			`rules[0].match_shell.flags_any[0]: "--a=b" is not a long flag (--name)`},
		{"empty alternatives", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: x, flags_any: [[]]}}\n",
			`rules[0].match_shell.flags_any[0]: an empty list of spellings`},
		{"null flag", "rules:\n  - {match_tool: shell, action: deny, match_shell: {path: command, program: x, flags_any: [~]}}\n",
			`rules[0].match_shell.flags_any[0]: must be a flag or a list of its spellings, not null`},
		{"allow with flags", "rules:\n  - match_tool: shell\n    action: allow\n    match_shell: {path: command, program: rm, flags_all: [interactive]}\n",
			"rules[0].match_shell: an allow rule cannot require flags: that a flag is given does not make a command safe (list programs only) (line 4)"},
		{"inside a rule set", "guards:\n  - {name: g, rules: [{match_tool: shell, action: deny, match_shell: {path: command}}]}\n",
			"guards[0].rules[0].match_shell.program: required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("", []byte(tt.yaml))
			if err == nil || strings.Count(err.Error(), tt.want) != 1 {
				t.Errorf("got\n%v\nwant it to contain %q once", err, tt.want)
			}
		})
	}
}
