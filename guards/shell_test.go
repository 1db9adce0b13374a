package guards

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/noeta-go/noeta"
)

func shellArgs(t *testing.T, command string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{"command": command})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMatchShellRecursiveForce is the rule a regex cannot write: deny rm
// with the recursive and force flags in any spelling. Every command in the
// "match" group passes the regex rm\s+-rf (the old advice) unless it happens
// to contain that text; each one runs rm -r -f. The "cannot judge" group is
// what cannot be known before the script runs: a deny rule must refuse it,
// saying why. The "no" group must stay allowed.
func TestMatchShellRecursiveForce(t *testing.T) {
	r := mustRules(t, Rule{
		MatchTool:  "shell",
		MatchShell: &MatchShell{Path: "command", Programs: []string{"rm"}, FlagsAll: [][]string{{"recursive"}, {"force"}}},
		Action:     noeta.VerdictDeny,
		Reason:     "recursive forced delete",
	})
	const (
		match   = "match"
		unknown = "cannot judge"
		no      = "no"
	)
	tests := []struct {
		command string
		want    string
		why     string // for unknown: part of the reason
	}{
		// Flag spellings.
		{"rm -rf x", match, ""},
		{"rm -fr x", match, ""},
		{"rm -Rf x", match, ""},
		{"rm -r -f x", match, ""},
		{"rm -f -R x", match, ""},
		{"rm --recursive --force x", match, ""},
		{"rm -R --force x", match, ""},
		{"rm --rec --f x", match, ""}, // GNU takes unambiguous abbreviations
		{"rm --recursive=x --force x", match, ""},
		{"rm -vrf x", match, ""},
		{"rm x -r -f", match, ""}, // GNU permutes options after operands
		// Quoting and escapes.
		{"'rm' -rf x", match, ""},
		{`"rm" "-rf" x`, match, ""},
		{`r"m" -r'f' x`, match, ""},
		{`\rm -rf x`, match, ""},
		{`rm -r""f x`, match, ""},
		{"rm \\\n -rf x", match, ""},
		{`$'rm' -rf x`, match, ""},
		// Where commands hide.
		{"ls; rm -rf x", match, ""},
		{"true && rm -rf x", match, ""},
		{"false || rm -rf x", match, ""},
		{"ls | rm -rf x", match, ""},
		{"rm -rf x &", match, ""},
		{"! rm -rf x", match, ""},
		{"(rm -rf x)", match, ""},
		{"{ rm -rf x; }", match, ""},
		{"echo $(rm -rf x)", match, ""},
		{"echo `rm -rf x`", match, ""},
		{`echo "$(rm -rf x)"`, match, ""},
		{"x=$(rm -rf y)", match, ""},
		{"bash -c 'cat <(rm -rf x)'", match, ""},
		// bash reads arithmetic, dash two subshells that run rm -rf /x.
		{"((rm -rf /x))", match, ""},
		{"ls > $(rm -rf x)", match, ""},
		{"cat <<EOF\n$(rm -rf x)\nEOF", match, ""},
		{"if true; then rm -rf x; fi", match, ""},
		{"if rm -rf x; then :; fi", match, ""},
		{"while true; do rm -rf x; done", match, ""},
		{"for f in a b; do rm -rf $f; done", match, ""},
		{"case y in y) rm -rf x;; esac", match, ""},
		{"f() { rm -rf x; }; f", match, ""},
		{"bash -c 'function f { rm -rf x; }'", match, ""},
		{"time rm -rf x", match, ""},
		{"echo a\nrm -rf x # a comment", match, ""},
		// Program paths.
		{"/bin/rm -rf x", match, ""},
		{"/usr/bin/rm -rf x", match, ""},
		{"./rm -rf x", match, ""},
		{`"$HOME"/bin/rm -rf x`, match, ""},
		{"~/bin/rm -rf x", match, ""},
		{"RM -rf x", match, ""}, // case-insensitive file systems
		// Wrappers.
		{"env rm -rf x", match, ""},
		{"env -i FOO=1 rm -rf x", match, ""},
		{"env - rm -rf x", match, ""},
		{"zsh -c '=rm -rf x'", match, ""},
		{"FOO=1 rm -rf x", match, ""},
		{"sudo rm -rf x", match, ""},
		{"sudo -u root -E rm -rf x", match, ""},
		{"sudo --user=root -- rm -rf x", match, ""},
		{"doas rm -rf x", match, ""},
		{"command rm -rf x", match, ""},
		{"builtin command rm -rf x", match, ""},
		{"exec rm -rf x", match, ""},
		{"exec -a name rm -rf x", match, ""},
		{"nice rm -rf x", match, ""},
		{"nice -n 5 rm -rf x", match, ""},
		{"nice -5 rm -rf x", match, ""},
		{"nohup rm -rf x", match, ""},
		{"timeout 5 rm -rf x", match, ""},
		{"timeout -s KILL 5 rm -rf x", match, ""},
		{"timeout --sig=KILL -k 1 5 rm -rf x", match, ""},
		{"stdbuf -o0 rm -rf x", match, ""},
		{"setsid -f rm -rf x", match, ""},
		{"ionice -c 3 rm -rf x", match, ""},
		{"chroot / rm -rf x", match, ""},
		{"xargs rm -rf", match, ""},
		{"find . -print0 | xargs -0 -n 1 rm -rf", match, ""},
		{`find . -name x -exec rm -rf {} \;`, match, ""},
		{"find . -execdir rm -r -f {} +", match, ""},
		{"busybox rm -rf x", match, ""},
		{"sudo env nice -n 1 rm -rf x", match, ""},
		{"watch -n 5 rm -rf x", match, ""},
		{"watch 'ls; rm -rf x'", match, ""},
		{"ssh -p 22 host 'cd /; rm -rf x'", match, ""},
		{"ssh host rm -r -f x", match, ""},
		// Scripts run by scripts.
		{"sh -c 'rm -rf x'", match, ""},
		{`bash -c "rm -r -f x"`, match, ""},
		{"bash -ec 'rm -rf x'", match, ""},
		{"bash -o pipefail -c 'ls | rm -rf x'", match, ""},
		{"sh -c 'sh -c \"rm -rf x\"'", match, ""},
		{"env bash -c 'rm -fr x'", match, ""},
		{"busybox sh -c 'rm -rf x'", match, ""},
		{"eval 'rm -rf x'", match, ""},
		{"eval rm -rf x", match, ""},
		{"su -c 'rm -rf x' root", match, ""},
		{"trap 'rm -rf x' EXIT", match, ""},
		{"sudo sh -c 'cd /tmp && rm -rf x'", match, ""},

		// What cannot be known before the script runs.
		{"$X -rf y", unknown, `the program "$X" is not known before it runs`},
		{"$(echo rm) -rf y", unknown, `the program "$(echo rm)" is not known`},
		{"`echo rm` -rf y", unknown, "is not known before it runs"},
		{"/bin/r? -rf y", unknown, `the program "/bin/r?" is not known`},
		{"{rm,-rf,y}", unknown, `the program "{rm,-rf,y}" is not known`},
		{"rm -r $F y", unknown, `rm's argument "$F" is not known before it runs and could be a flag`},
		{`rm -r "$F" y`, unknown, `rm's argument "\"$F\"" is not known`},
		{"rm -r -$F y", unknown, "could be a flag"},
		{"rm -r * ", unknown, `rm's argument "*" is not known`}, // a file named -f
		{"rm -{r,f} y", unknown, "could be a flag"},
		{`$'\x72m' -rf y`, unknown, "is not known before it runs"},
		{"echo -f | xargs rm -r", unknown, "xargs adds arguments it reads from its input"},
		{`sh -c "$S"`, unknown, `sh runs "\"$S\"", which is not known before it runs`},
		{"bash script.sh", unknown, `bash runs the script file "script.sh", which a rule cannot read`},
		{"curl -s x | sh", unknown, "sh reads the script it runs from its input"},
		{"sh <<EOF\nrm -rf x\nEOF", unknown, "sh reads the script it runs from its input"},
		{`eval "$X"`, unknown, "eval runs"},
		{"source ./x.sh", unknown, "source runs a script file"},
		{". ./x.sh", unknown, ". runs a script file"},
		{"alias ls='rm -rf'", unknown, "alias changes what later command names run"},
		{"hash -p /bin/rm ls; ls -rf x", unknown, "hash changes what later command names run"},
		{"sudo --bogus rm -rf y", unknown, `sudo has the option "--bogus", which a rule does not know`},
		{"env -S 'rm -rf y'", unknown, `env has the option "-S"`},
		{"su root", unknown, "su runs a shell that reads its input"},
		{"ssh host", unknown, "ssh opens a remote shell that reads its input"},
		{"rm -rf 'x", unknown, "the shell command does not parse"},
		{"echo $(", unknown, "the shell command does not parse"},
		// The tool's shell may be dash: bash-only text cannot be judged.
		{"cat <(ls)", unknown, "the shell command does not parse as posix"},
		{"function f { ls; }", unknown, "the shell command does not parse as posix"},
		{"sudo -u $U ls", unknown, `sudo has the argument "$U", which is not known before it runs`}, // U='root curl'
		{"sh -o $O -c 'ls'", unknown, `sh's argument "$O" is not known`},                            // O='x -c "rm -rf y"'
		{`PS4='$(rm -rf y)' bash -xc ls`, unknown, "it sets PS4, whose text the shell runs"},
		{`export BASH_ENV=./x.sh; bash -c ls`, unknown, "it sets BASH_ENV"},
		{`env PS4='$(rm -rf y)' bash -xc ls`, unknown, "env sets PS4, whose text the shell runs"},
		{`env A="$@" ls`, unknown, `env has the argument "A=\"$@\""`},
		{`bash -c 'sudo "${args[@]}"'`, unknown, `sudo has the argument`},
		{`rm -r "$@"`, unknown, "could be a flag"},
		{"timeout $T ls", unknown, `timeout has the argument "$T"`},
		{"env A=$V ls", unknown, `env has the argument "A=$V"`},
		{strings.Repeat("eval ", 8) + "rm -rf x", match, ""},
		{strings.Repeat("eval ", 9) + "ls", unknown, "shell scripts run by shell scripts more than 8 deep"},
		{"rm -r /tmp/$X", unknown, "could be a flag"},

		// Not rm with both flags, and knowably so.
		{"rm file", no, ""},
		{"rm -r dir", no, ""},
		{"rm -f file", no, ""},
		{"rm -i -r dir", no, ""},
		{"rm -r -- -f", no, ""},
		{`rm -r -- "$dir"`, no, ""},
		{"rm -r ./-f", no, ""},
		{`rm -r "/tmp/$X"`, no, ""},
		{"echo rm -rf", no, ""},
		{`echo "rm -rf /"`, no, ""},
		{"printf 'rm -rf x'", no, ""},
		{"grep -rf pattern .", no, ""},
		{"ls -rf", no, ""},
		{"git rm -rf x", no, ""},
		{"rmdir -p x", no, ""},
		{"mv -f a b", no, ""},
		{"# rm -rf x", no, ""},
		{"echo $(ls -rf)", no, ""},
		{"sh -c 'ls -rf'", no, ""},
		{"sudo ls -rf", no, ""},
		{"timeout 5 ls -rf", no, ""},
		{"ssh host ls -rf", no, ""},
		{"watch -n 1 ls -rf", no, ""},
		{"command -v rm", no, ""},
		{"for f in *; do echo $f; done", no, ""},
		{"X=$(cat f); echo $X", no, ""},
		{`env A="$V" ls -rf`, no, ""},
		{`"" rm -rf x`, no, ""}, // an empty command name runs nothing
		{`env A="$*" ls -rf`, no, ""},
		{`sudo -u "$U" ls -rf`, no, ""},
		{"x=1; ((x++)); echo $x", no, ""},
		{"bash -c '[[ -f x ]] && ls'", no, ""},
		{`echo "$HOME" > /tmp/x`, no, ""},
		{"find . -name x -delete", no, ""}, // a limit: another program that deletes
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			got := checkGuard(t, r, toolCall("shell", shellArgs(t, tt.command)), gctx(noeta.GovernanceState{}, 0))
			switch tt.want {
			case match:
				wantVerdict(t, got, noeta.VerdictDeny, "recursive forced delete")
			case no:
				wantVerdict(t, got, noeta.VerdictAllow, "")
			case unknown:
				if got.Verdict != noeta.VerdictDeny || !strings.HasPrefix(got.Reason, `recursive forced delete (rules[0] on "shell": `) ||
					!strings.HasSuffix(got.Reason, ": treated as matching)") || !strings.Contains(got.Reason, tt.why) {
					t.Errorf("got %v %q, want a denial saying %q", got.Verdict, got.Reason, tt.why)
				}
			}
		})
	}
}

// TestMatchShellAllow: an allow rule over shell lets a script through only
// if every command it runs is listed and nothing in it escapes the list; the
// rule after it (ask a human) decides everything else.
func TestMatchShellAllow(t *testing.T) {
	r := mustRules(t,
		Rule{MatchTool: "shell", MatchShell: &MatchShell{Path: "command", Programs: []string{"ls", "cat", "grep", "echo", "wc"}}, Action: noeta.VerdictAllow},
		Rule{MatchTool: "shell", Action: noeta.VerdictRequireApproval, Reason: "ask"},
	)
	tests := []struct {
		command string
		allow   bool
	}{
		{"ls -la", true},
		{"ls | grep x | wc -l", true},
		{"echo $(ls)", true},
		{"cat x > /dev/null 2>&1", true},
		{"ls && echo done", true},
		{"/bin/ls", true},
		{"ls; rm x", false},
		{"ls $(rm x)", false},
		{"ls > out.txt", false},
		{"ls >> out.txt", false},
		{"ls >& out.txt", false},
		{"X=1 ls", false},
		{"PATH=/tmp ls", false},
		{"export PATH=/tmp; ls", false},
		{"ls() { rm -rf x; }; ls", false},
		{"sudo ls", false},
		{"bash -c 'ls'", false},
		{"$X", false},
		{"ls 'x", false},
		{"alias x=ls", false},
		{"find . -exec ls {} ;", false},
		{"for f in a; do ls $f; done", false},
		{"echo $((1+2))", false},
		{"echo ${PATH:=/tmp}; ls", false},
		{"echo ${HOME:-/tmp}; ls", true},
		{"xargs ls", false},
	}
	for _, tt := range tests {
		t.Run(tt.command, func(t *testing.T) {
			got := checkGuard(t, r, toolCall("shell", shellArgs(t, tt.command)), gctx(noeta.GovernanceState{}, 0))
			if tt.allow {
				wantVerdict(t, got, noeta.VerdictAllow, "")
			} else {
				wantVerdict(t, got, noeta.VerdictRequireApproval, "ask")
			}
		})
	}
}

// TestMatchShellFlags: flags spelled out in the rule, flags_any, programs
// without a flag table, and arguments that are not shell text.
func TestMatchShellFlags(t *testing.T) {
	tests := []struct {
		name    string
		m       MatchShell
		args    string
		verdict noeta.Verdict
	}{
		{"spelled short", MatchShell{Path: "command", Programs: []string{"git"}, FlagsAny: [][]string{{"-f", "--force"}}}, shellArgs(t, "git push -f"), noeta.VerdictDeny},
		{"spelled long", MatchShell{Path: "command", Programs: []string{"git"}, FlagsAny: [][]string{{"-f", "--force"}}}, shellArgs(t, "git push --force origin"), noeta.VerdictDeny},
		{"spelled long abbreviated", MatchShell{Path: "command", Programs: []string{"git"}, FlagsAny: [][]string{{"-f", "--force"}}}, shellArgs(t, "git push --forc"), noeta.VerdictDeny},
		{"none of flags_any", MatchShell{Path: "command", Programs: []string{"git"}, FlagsAny: [][]string{{"-f", "--force"}}}, shellArgs(t, "git push origin"), noeta.VerdictAllow},
		{"single-dash word", MatchShell{Path: "command", Programs: []string{"find"}, FlagsAny: [][]string{{"-delete"}}}, shellArgs(t, "find . -delete"), noeta.VerdictDeny},
		{"single-dash word is exact", MatchShell{Path: "command", Programs: []string{"find"}, FlagsAny: [][]string{{"-delete"}}}, shellArgs(t, "find . -name x"), noeta.VerdictAllow},
		// Without a flag table, "--" after an option may be its argument.
		{"-- as an option's argument", MatchShell{Path: "command", Programs: []string{"tool"}, FlagsAll: [][]string{{"-f"}}}, shellArgs(t, "tool -e -- -f"), noeta.VerdictDeny},
		{"-- ends options", MatchShell{Path: "command", Programs: []string{"tool"}, FlagsAll: [][]string{{"-f"}}}, shellArgs(t, "tool x -- -f"), noeta.VerdictAllow},
		{"chmod -r is not recursive", MatchShell{Path: "command", Programs: []string{"chmod"}, FlagsAll: [][]string{{"recursive"}}}, shellArgs(t, "chmod -r x"), noeta.VerdictAllow},
		{"chmod -R is", MatchShell{Path: "command", Programs: []string{"chmod"}, FlagsAll: [][]string{{"recursive"}}}, shellArgs(t, "chmod -R 777 /"), noeta.VerdictDeny},
		{"cp -a is recursive", MatchShell{Path: "command", Programs: []string{"cp", "rm"}, FlagsAll: [][]string{{"recursive"}}}, shellArgs(t, "cp -a x y"), noeta.VerdictDeny},
		{"program only", MatchShell{Path: "command", Programs: []string{"curl", "wget"}}, shellArgs(t, "cd /tmp && wget http://x"), noeta.VerdictDeny},
		{"nested path", MatchShell{Path: "opts.script", Programs: []string{"rm"}}, `{"opts":{"script":"rm x"}}`, noeta.VerdictDeny},
		{"missing argument", MatchShell{Path: "command", Programs: []string{"rm"}}, `{}`, noeta.VerdictAllow},
		{"not a string", MatchShell{Path: "command", Programs: []string{"rm"}}, `{"command":["rm","-rf","x"]}`, noeta.VerdictAllow},
		{"escaped JSON", MatchShell{Path: "command", Programs: []string{"rm"}}, `{"command":"echo \u00e9\n\trm x"}`, noeta.VerdictDeny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.m
			r := mustRules(t, Rule{MatchTool: "*", MatchShell: &m, Action: noeta.VerdictDeny, Reason: "x"})
			got := checkGuard(t, r, toolCall("shell", tt.args), gctx(noeta.GovernanceState{}, 0))
			if got.Verdict != tt.verdict {
				t.Errorf("got %v %q, want %v", got.Verdict, got.Reason, tt.verdict)
			}
		})
	}
}

// TestMatchShellParsesOnce: rules over the same argument share one parse.
func TestMatchShellParsesOnce(t *testing.T) {
	r := mustRules(t,
		Rule{MatchTool: "shell", MatchShell: &MatchShell{Path: "command", Programs: []string{"curl"}}, Action: noeta.VerdictDeny},
		Rule{MatchTool: "shell", MatchShell: &MatchShell{Path: "command", Programs: []string{"rm"}, FlagsAll: [][]string{{"force"}}}, Action: noeta.VerdictDeny},
	)
	ev := ruleEval{call: noeta.ToolCall{Tool: "shell", Args: json.RawMessage(shellArgs(t, "rm -r x"))}, c: gctx(noeta.GovernanceState{}, 0)}
	defer ev.release()
	for i := range r.rules {
		if res, _, err := r.rules[i].eval(&ev); err != nil || res != notMatched {
			t.Fatalf("rule %d: %v, %v", i, res, err)
		}
	}
	if len(ev.scripts) != 1 || ev.scripts["command"] == nil {
		t.Errorf("scripts after two rules: %+v", ev.scripts)
	}
}

// TestMatchShellConfig: match_shell in noeta.yaml (its load errors are
// config's TestMatchShellConfigErrors).
func TestMatchShellConfig(t *testing.T) {
	cfg, err := parseConfig([]byte(`
rules:
  - match_tool: shell
    match_shell: {path: command, program: rm, flags_all: [recursive, force]}
    action: deny
    reason: "recursive forced delete"
  - match_tool: shell
    match_shell:
      path: command
      program: [git]
      flags_any: [[-f, --force], --force-with-lease]
    action: require_approval
  - match_tool: shell
    match_shell: {path: command, program: [ls, cat]}
    action: allow
`))
	if err != nil {
		t.Fatal(err)
	}
	c := gctx(noeta.GovernanceState{}, 0)
	for cmd, want := range map[string]noeta.Verdict{
		"sudo rm --force -R /":  noeta.VerdictDeny,
		"git push --force-with": noeta.VerdictRequireApproval,
		"ls | cat":              noeta.VerdictAllow,
		"rm -r x":               noeta.VerdictAllow,
	} {
		if got := checkGuard(t, cfg.rules, toolCall("shell", shellArgs(t, cmd)), c); got.Verdict != want {
			t.Errorf("%s: got %v %q, want %v", cmd, got.Verdict, got.Reason, want)
		}
	}

}

// FuzzMatchShell feeds arbitrary text to match_shell. It never panics; a
// script a refusing rule finds no match in has no command it could not
// resolve; and whatever an allow rule over a program lets through, a deny
// rule over the same program matches (or the script runs nothing).
func FuzzMatchShell(f *testing.F) {
	for _, s := range []string{
		"rm -rf x", "sudo -u root sh -c 'r\"m\" -r -f x' | xargs", "ls $(cat x) > /dev/null", "git push --for $X; eval \"$Y\"",
		"((rm -rf /x))", "find . -exec rm {} \\;", "env -i A=1 nice -n 3 timeout 5 rm -fr x", "f() { rm -rf \"$@\"; }; f /",
		"cat <<EOF\n$(rm -rf x)\nEOF", "bash -c 'cat <(rm -rf x)'", "trap 'rm -rf x' EXIT", "{rm,-rf,x}", "x=$'\\x72m'; $x -rf y",
	} {
		f.Add(s)
	}
	deny := mustRules(f, Rule{MatchTool: "*", MatchShell: &MatchShell{Path: "c", Programs: []string{"rm"}, FlagsAll: [][]string{{"recursive"}, {"force"}}}, Action: noeta.VerdictDeny, Reason: "x"})
	denyRm := mustRules(f, Rule{MatchTool: "*", MatchShell: &MatchShell{Path: "c", Programs: []string{"rm"}}, Action: noeta.VerdictDeny, Reason: "x"})
	allowRm := mustRules(f, Rule{MatchTool: "*", MatchShell: &MatchShell{Path: "c", Programs: []string{"rm"}}, Action: noeta.VerdictAllow},
		Rule{MatchTool: "*", Action: noeta.VerdictDeny, Reason: "other"})
	c := gctx(noeta.GovernanceState{}, 0)
	f.Fuzz(func(t *testing.T, script string) {
		b, err := json.Marshal(map[string]string{"c": script})
		if err != nil {
			return
		}
		a := toolCall("t", string(b))
		ev := ruleEval{call: noeta.ToolCall{Tool: "t", Args: b}, c: c}
		res, _, err := deny.rules[0].eval(&ev)
		ev.release()
		if err != nil {
			t.Fatal(err)
		}
		if s := ev.scripts["c"]; res == notMatched && s != nil {
			for _, cmd := range s.cmds {
				if cmd.why != "" {
					t.Fatalf("%q: no match although %s", script, cmd.why)
				}
			}
		}
		checkGuard(t, deny, a, c)
		if checkGuard(t, allowRm, a, c).IsAllow() {
			ev := ruleEval{call: noeta.ToolCall{Tool: "t", Args: b}, c: c}
			res, _, _ := denyRm.rules[0].eval(&ev)
			if res != matched && len(ev.scripts["c"].cmds) > 0 {
				t.Fatalf("%q: allowed as rm only, but a deny rule on rm says %v", script, res)
			}
		}
	})
}

// TestRegexCannotReadShell pins what docs/shell-rules.md and
// examples/noeta.yaml say of the regex rm\s+-rf: it misses each of these
// commands, every one of which runs rm with -r and -f, and it catches
// commands that delete nothing; match_shell gets both right.
func TestRegexCannotReadShell(t *testing.T) {
	regex := mustRules(t, Rule{MatchTool: "shell", MatchArg: &MatchArg{Path: "command", Op: MatchRegex, Value: `rm\s+-rf`}, Action: noeta.VerdictDeny})
	shell := mustRules(t, Rule{MatchTool: "shell", MatchShell: &MatchShell{Path: "command", Programs: []string{"rm"}, FlagsAll: [][]string{{"recursive"}, {"force"}}}, Action: noeta.VerdictDeny})
	c := gctx(noeta.GovernanceState{}, 0)
	for _, tt := range []struct {
		command string
		deletes bool
	}{
		{"rm -r -f x", true},
		{"rm -fr x", true},
		{"rm -Rf x", true},
		{"rm --recursive --force x", true},
		{"'rm' -rf x", true},
		{`"rm" "-rf" x`, true},
		{"echo $(rm -r -f x)", true},
		{"ls; rm -fr x", true},
		{"true && rm -R -f x", true},
		{"/bin/rm -fr x", true},
		{"env rm --force -r x", true},
		{"sh -c 'rm -r -f x'", true},
		{"rm --rec --f x", true},
		{`r""m -r''f x`, true},
		{"echo `rm -fr x`", true},
		{"false || rm -fr x", true},
		{"./rm -Rf x", true},
		{"sudo rm -fr x", true},
		{"xargs rm -fr", true},
		{"eval 'rm -fr x'", true},
		{"echo rm -rf", false},
		{"git rm -rf cache", false},
	} {
		a := toolCall("shell", shellArgs(t, tt.command))
		if byRegex := !checkGuard(t, regex, a, c).IsAllow(); byRegex == tt.deletes {
			t.Errorf("%s: the regex denies it: %v; the docs say it gets it wrong", tt.command, byRegex)
		}
		if byShell := !checkGuard(t, shell, a, c).IsAllow(); byShell != tt.deletes {
			t.Errorf("%s: match_shell denies it: %v, want %v", tt.command, byShell, tt.deletes)
		}
	}
}

// TestMatchShellWorkBound: nesting a script at the cap in evals would parse it
// once per level; past 4×MatchStringCap characters parsed, the matcher stops
// and a refusing rule refuses.
func TestMatchShellWorkBound(t *testing.T) {
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	script := strings.Repeat("ls; ", 6000) // 24,000 characters
	for range 5 {
		script = "eval " + quote(script)
	}
	r := mustRules(t, Rule{MatchTool: "shell", MatchShell: &MatchShell{Path: "command", Programs: []string{"rm"}}, Action: noeta.VerdictDeny, Reason: "x"})
	got := checkGuard(t, r, toolCall("shell", shellArgs(t, script)), gctx(noeta.GovernanceState{}, 0))
	if got.Verdict != noeta.VerdictDeny || !strings.Contains(got.Reason, "the script and the scripts it runs are more than 262144 characters to parse") {
		t.Errorf("got %v %q", got.Verdict, got.Reason)
	}
	// Three levels are within the bound, and judged.
	script = strings.Repeat("ls; ", 6000)
	for range 3 {
		script = "eval " + quote(script)
	}
	if got := checkGuard(t, r, toolCall("shell", shellArgs(t, script)), gctx(noeta.GovernanceState{}, 0)); !got.IsAllow() {
		t.Errorf("three levels: got %v %q", got.Verdict, got.Reason)
	}
}
