package guards

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/noeta-go/noeta"
	"mvdan.cc/sh/v3/syntax"
)

// MatchShell tests the commands a shell script held by one argument would
// run, as the shell parses it, instead of its text: the script is parsed
// (mvdan.cc/sh/v3, bash syntax) and every simple command in it is found —
// through ;, &&, ||, pipes, subshells, $(…) and `…`, process substitutions,
// if/while/for/case bodies and functions — then each command is resolved:
// the program by its basename (/bin/rm is rm), through the wrappers env,
// sudo, doas, command, builtin, exec, nice, nohup, timeout, stdbuf, ionice,
// setsid, chroot, time, xargs, busybox, toybox, watch and ssh (the remote
// command), through find's -exec, and
// into the scripts of sh/bash/… -c, su -c, eval and trap, parsed in turn (at
// most maxShellDepth deep). Quotes and escapes are removed as the shell
// would ('rm' "-r"f is rm -rf).
//
// A deny or require_approval rule matches when any command the script runs is
// one of Programs with every flag of FlagsAll and at least one of FlagsAny.
// What cannot be known before the script runs makes it match too, saying why:
// a script that does not parse, a program named by an expansion ($X, $(…)), a
// flag word that is an expansion or a glob, a shell run on a file or on its
// input, eval of an expansion, alias, a script over MatchStringCap.
//
// An allow rule matches only when every command the script runs is one of
// Programs (wrappers included: sudo ls needs sudo listed too), everything
// could be resolved, and the script assigns no variables, defines no
// functions and writes no files through redirections (other than /dev/null).
// It may not name flags: the presence of a flag does not make a command safe.
//
// A missing argument, or one that is not a string, does not match.
type MatchShell struct {
	// Path is the dotted path of the argument holding the script.
	Path string
	// Programs are the program names, compared with the basename of the
	// command's program ignoring case.
	Programs []string
	// FlagsAll are flags that must all be given; FlagsAny, flags of which
	// one must be. A flag is a list of alternative spellings, each one a name
	// from the program's flag table ("recursive": -r, -R, --recursive for
	// rm, see shellFlagTable) or a spelling: "-r" (a short flag, also found
	// in clusters: -rf, -fr), "--recursive" (a long flag, also
	// --recursive=x and abbreviations such as --rec), "-delete" (a
	// single-dash word, exactly). Flags are looked for before "--".
	FlagsAll [][]string
	FlagsAny [][]string
}

// maxShellDepth bounds how deeply scripts run by scripts (sh -c 'sh -c …')
// are parsed; deeper is a script a rule cannot judge.
const maxShellDepth = 8

// maxShellWork bounds the characters parsed for one argument, every reading
// of every nested script counted: nesting (eval eval …) must not multiply
// the work of a script at MatchStringCap.
const maxShellWork = 4 * MatchStringCap

// shellFlags is what a flag table knows about a program: its flags by name,
// and which of its options take an argument as the next word (so that a "--"
// after them is their argument, not the end of options).
type shellFlags struct {
	names    map[string][]string
	argShort string
	argLong  []string
}

// shellFlagTable names the flags of a few programs whose spellings vary, so
// that a rule can say "recursive" instead of listing them. Programs differ:
// chmod -r removes read permission, it is not recursive.
var shellFlagTable = map[string]shellFlags{
	"rm": {names: map[string][]string{
		"recursive":        {"-r", "-R", "--recursive"},
		"force":            {"-f", "--force"},
		"interactive":      {"-i", "-I", "--interactive"},
		"dir":              {"-d", "--dir"},
		"no-preserve-root": {"--no-preserve-root"},
	}},
	"cp": {names: map[string][]string{
		"recursive": {"-r", "-R", "--recursive", "-a", "--archive"},
		"force":     {"-f", "--force"},
	}, argShort: "St", argLong: []string{"suffix", "target-directory"}},
	"mv": {names: map[string][]string{
		"force": {"-f", "--force"},
	}, argShort: "St", argLong: []string{"suffix", "target-directory"}},
	"chmod": {names: map[string][]string{"recursive": {"-R", "--recursive"}}, argLong: []string{"reference"}},
	"chown": {names: map[string][]string{"recursive": {"-R", "--recursive"}}, argLong: []string{"reference", "from"}},
	"chgrp": {names: map[string][]string{"recursive": {"-R", "--recursive"}}, argLong: []string{"reference"}},
}

// flagSpec is one flag of a rule, compiled: any of its spellings matches.
type flagSpec struct {
	name  string // as the rule wrote it, for messages
	short string // letters: -r, also in clusters
	long  []string
	words []string // single-dash words, matched exactly
}

func (f *flagSpec) matches(word string) bool {
	if name, ok := strings.CutPrefix(word, "--"); ok {
		name, _, _ = strings.Cut(name, "=")
		if name == "" {
			return false
		}
		for _, l := range f.long {
			// GNU getopt_long takes any unambiguous prefix.
			if strings.HasPrefix(l, name) {
				return true
			}
		}
		return false
	}
	if slices.Contains(f.words, word) {
		return true
	}
	// Every letter of a cluster is taken as a flag: for options that take
	// an argument (-ofile) this may see a flag that is not there, which
	// errs toward refusing.
	return strings.ContainsAny(word[1:], f.short)
}

type programFlags struct {
	all, any []flagSpec
	table    *shellFlags
}

// shellMatcher is a compiled MatchShell.
type shellMatcher struct {
	path     string
	segments [][]byte
	allow    bool
	programs map[string]programFlags // by lower-case name
}

func compileShell(m *MatchShell, action noeta.Verdict, p string, errs *configErrors) (*shellMatcher, bool) {
	ok := true
	fail := func(field, format string, args ...any) {
		errs.addf(join(p, field), format, args...)
		ok = false
	}
	sm := &shellMatcher{path: m.Path, allow: action == noeta.VerdictAllow, programs: map[string]programFlags{}}
	if segs, err := compilePath(m.Path); err != nil {
		fail("path", "%v", err)
	} else {
		sm.segments = segs
	}
	if len(m.Programs) == 0 {
		fail("program", "required: a program name or a list of them")
	}
	var order []string
	for i, prog := range m.Programs {
		if prog == "" || strings.ContainsAny(prog, "/ \t\n") {
			errs.addf(index(join(p, "program"), i), "must be a program's name without a directory (rm, not /bin/rm), not %q", prog)
			ok = false
			continue
		}
		if name := strings.ToLower(prog); !slices.Contains(order, name) {
			order = append(order, name)
		}
	}
	if sm.allow && (len(m.FlagsAll) > 0 || len(m.FlagsAny) > 0) {
		errs.add(p, "an allow rule cannot require flags: that a flag is given does not make a command safe (list programs only)")
		return sm, false
	}
	// Flags are compiled per program (a name means different spellings
	// for different programs); a bad spelling is reported once.
	reported := map[string]bool{}
	report := func(path, msg string) {
		if !reported[path+"\x00"+msg] {
			reported[path+"\x00"+msg] = true
			errs.add(path, msg)
		}
		ok = false
	}
	for _, prog := range order {
		pf := programFlags{}
		if t, found := shellFlagTable[prog]; found {
			pf.table = &t
		}
		pf.all = compileFlags(m.FlagsAll, prog, pf.table, join(p, "flags_all"), report)
		pf.any = compileFlags(m.FlagsAny, prog, pf.table, join(p, "flags_any"), report)
		sm.programs[prog] = pf
	}
	return sm, ok
}

func compileFlags(flags [][]string, prog string, table *shellFlags, p string, report func(path, msg string)) []flagSpec {
	out := make([]flagSpec, 0, len(flags))
	for i, alts := range flags {
		fp := index(p, i)
		if len(alts) == 0 {
			report(fp, "an empty list of spellings")
			continue
		}
		spec := flagSpec{name: strings.Join(alts, "/")}
		var add func(s string, fromTable bool)
		add = func(s string, fromTable bool) {
			switch {
			case strings.HasPrefix(s, "--"):
				if len(s) == 2 || strings.ContainsAny(s, "= \t\n") {
					report(fp, fmt.Sprintf("%q is not a long flag (--name)", s))
					return
				}
				spec.long = append(spec.long, s[2:])
			case strings.HasPrefix(s, "-"):
				if len(s) == 1 || strings.ContainsAny(s, "= \t\n") {
					report(fp, fmt.Sprintf("%q is not a flag (-x, --name or -name)", s))
					return
				}
				if len(s) == 2 {
					spec.short += s[1:]
				} else {
					spec.words = append(spec.words, s)
				}
			case fromTable:
				panic("guards: shellFlagTable spelling without a dash: " + s)
			default:
				var spellings []string
				if table != nil {
					spellings = table.names[s]
				}
				if spellings == nil {
					report(fp, fmt.Sprintf("%q is not a flag %s is known to have (%s); spell it out, e.g. [-x, --%s]", s, prog, knownFlags(table), s))
					return
				}
				for _, sp := range spellings {
					add(sp, true)
				}
			}
		}
		for _, s := range alts {
			add(s, false)
		}
		out = append(out, spec)
	}
	return out
}

func knownFlags(t *shellFlags) string {
	if t == nil {
		return "it has no flag table"
	}
	var names []string
	for n := range t.names {
		names = append(names, n)
	}
	slices.Sort(names)
	return "known: " + strings.Join(names, ", ")
}

// match tests the script at the matcher's path.
func (sm *shellMatcher) match(ev *ruleEval, args []byte) (ruleOutcome, string) {
	v, ok := lookupPath(args, sm.segments)
	if !ok {
		return notMatched, ""
	}
	script := ev.scripts[sm.path]
	if script == nil {
		s, n, isStr := stringValue(v)
		if !isStr {
			return notMatched, ""
		}
		script = &shellScript{}
		if n > MatchStringCap {
			script.unknown(overCap(sm.path, n))
		} else {
			script.analyse(string(s), topLevel)
		}
		if ev.scripts == nil {
			ev.scripts = map[string]*shellScript{}
		}
		ev.scripts[sm.path] = script
	}
	if sm.allow {
		return sm.matchAll(script), ""
	}
	return sm.matchAny(script)
}

// matchAny is a refusing rule's test: some command matches, or else some
// command could not be resolved.
func (sm *shellMatcher) matchAny(s *shellScript) (ruleOutcome, string) {
	why := ""
	for i := range s.cmds {
		c := &s.cmds[i]
		if c.why != "" {
			why = firstOf(why, c.why)
			continue
		}
		pf, listed := sm.programs[strings.ToLower(c.program)]
		if !listed {
			continue
		}
		switch res, w := pf.test(c); res {
		case matched:
			return matched, ""
		case unjudged:
			why = firstOf(why, w)
		}
	}
	if why != "" {
		return unjudged, why
	}
	return notMatched, ""
}

func firstOf(first, next string) string {
	if first != "" {
		return first
	}
	return next
}

// matchAll is an allow rule's test: every command is resolved and listed, and
// the script does nothing else a program list cannot account for.
func (sm *shellMatcher) matchAll(s *shellScript) ruleOutcome {
	if s.impure != "" {
		return notMatched
	}
	for i := range s.cmds {
		c := &s.cmds[i]
		if c.why != "" {
			return notMatched
		}
		if _, listed := sm.programs[strings.ToLower(c.program)]; !listed {
			return notMatched
		}
	}
	return matched
}

// test checks a command of a listed program against the rule's flags.
func (pf *programFlags) test(c *shellCmd) (ruleOutcome, string) {
	if len(pf.all) == 0 && len(pf.any) == 0 {
		return matched, ""
	}
	var seen []bool
	if n := len(pf.all) + len(pf.any); n <= 8 {
		var buf [8]bool
		seen = buf[:n]
	} else {
		seen = make([]bool, n)
	}
	dynamic := -1 // the first word that could be any flag
	ended := false
	for i, w := range c.args {
		if w.dynamic {
			if dynamic < 0 && (w.splits || w.lit == "" || w.lit[0] == '-') {
				dynamic = i
			}
			continue
		}
		s := w.lit
		if s == "--" {
			if i > 0 && pf.mayTakeArgument(c.args[i-1]) {
				continue // "--" may be that option's argument
			}
			ended = true
			break
		}
		if len(s) < 2 || s[0] != '-' {
			continue
		}
		for k := range pf.all {
			seen[k] = seen[k] || pf.all[k].matches(s)
		}
		for k := range pf.any {
			seen[len(pf.all)+k] = seen[len(pf.all)+k] || pf.any[k].matches(s)
		}
	}
	complete := true
	for k := range pf.all {
		complete = complete && seen[k]
	}
	if len(pf.any) > 0 && !slices.Contains(seen[len(pf.all):], true) {
		complete = false
	}
	switch {
	case complete:
		return matched, ""
	case dynamic >= 0:
		return unjudged, fmt.Sprintf("%s's argument %s is not known before it runs and could be a flag", c.program, c.args[dynamic].quoted())
	case c.extra != "" && !ended:
		return unjudged, c.extra
	}
	return notMatched, ""
}

// mayTakeArgument reports whether the word before a "--" may be an option
// that takes it as its argument.
func (pf *programFlags) mayTakeArgument(prev shellWord) bool {
	if prev.dynamic || len(prev.lit) < 2 || prev.lit[0] != '-' || prev.lit == "--" {
		return prev.dynamic
	}
	if name, ok := strings.CutPrefix(prev.lit, "--"); ok {
		if strings.Contains(name, "=") {
			return false
		}
		return pf.table == nil || slices.Contains(pf.table.argLong, name)
	}
	if pf.table == nil {
		return true
	}
	return strings.IndexByte(pf.table.argShort, prev.lit[len(prev.lit)-1]) >= 0
}

// shellScript is what a script would run, as far as it can be known
// statically.
type shellScript struct {
	parsed int // characters parsed so far, each language counted
	seen   map[analysed]bool
	cmds   []shellCmd
	// impure says why an allow rule cannot pass the script even if every
	// program is listed: it assigns variables, defines functions or writes
	// files through redirections.
	impure string
}

// analysed is a script parsed as a set of languages.
type analysed struct {
	src   string
	langs syntax.LangVariant
}

// shellCmd is one command: a program and its arguments, or why it cannot be
// known.
type shellCmd struct {
	program string // the basename
	args    []shellWord
	// extra says why arguments are added at run time (xargs).
	extra string
	// why is set when the command cannot be resolved.
	why string
}

// shellWord is a word after quote removal, or, if part of it is only known
// when the script runs, its static beginning.
type shellWord struct {
	lit     string // the word; if dynamic, the text before the first dynamic part
	dynamic bool
	// splits: the word may become several words or none (an unquoted
	// expansion, a glob, a brace expansion).
	splits bool
	// base: for a dynamic word that cannot split, the basename fixed by
	// static text after its last dynamic part ("$HOME"/bin/rm: rm).
	base string
	raw  string // the word as written
}

// quoted is the word as written, quoted and shortened for a reason.
func (w shellWord) quoted() string {
	t := w.raw
	if len(t) > 60 {
		t = t[:57] + "..."
	}
	return strconv.Quote(t)
}

func (s *shellScript) unknown(why string) {
	s.cmds = append(s.cmds, shellCmd{why: why})
}

func (s *shellScript) taint(why string) {
	if s.impure == "" {
		s.impure = why
	}
}

// level is where a script is parsed: how deep in scripts run by scripts,
// and as which shell languages.
type level struct {
	depth int
	langs []syntax.LangVariant
}

// The tool's shell may be a POSIX sh (dash) or bash, and they read some
// text differently: ((rm -rf /x)) is arithmetic to bash and two subshells
// running rm to dash. A script of unknown shell is parsed as both, and its
// commands are those of both readings; a script either refuses cannot be
// judged (a shell runs the commands before a syntax error).
var (
	posixOrBash = []syntax.LangVariant{syntax.LangPOSIX, syntax.LangBash}
	topLevel    = level{langs: posixOrBash}
)

// shellLangs are the languages of the shells whose -c script is parsed.
var shellLangs = map[string][]syntax.LangVariant{
	"sh": posixOrBash, "dash": posixOrBash, "ash": posixOrBash, "posh": posixOrBash, "yash": posixOrBash,
	"bash": {syntax.LangBash}, "rbash": {syntax.LangBash},
	"ksh": {syntax.LangMirBSDKorn}, "ksh93": {syntax.LangMirBSDKorn}, "mksh": {syntax.LangMirBSDKorn},
	"lksh": {syntax.LangMirBSDKorn}, "pdksh": {syntax.LangMirBSDKorn},
	"zsh": {syntax.LangZsh},
}

// in is the level of a script run from this one by a shell of langs.
func (l level) in(langs []syntax.LangVariant) level {
	return level{depth: l.depth + 1, langs: langs}
}

// analyse parses src and records its commands.
func (s *shellScript) analyse(src string, lv level) {
	if lv.depth > maxShellDepth {
		s.unknown(fmt.Sprintf("shell scripts run by shell scripts more than %d deep", maxShellDepth))
		return
	}
	// Both readings of a script find the scripts it runs; parse each once.
	key := analysed{src: src}
	for _, l := range lv.langs {
		key.langs |= l
	}
	if s.seen[key] {
		return
	}
	if s.seen == nil {
		s.seen = map[analysed]bool{}
	}
	s.seen[key] = true
	if s.parsed += len(src) * len(lv.langs); s.parsed > maxShellWork {
		s.unknown(fmt.Sprintf("the script and the scripts it runs are more than %d characters to parse", maxShellWork))
		return
	}
	files := make([]*syntax.File, len(lv.langs))
	for i, lang := range lv.langs {
		f, err := parseShell(src, lang)
		if err != nil {
			s.unknown(fmt.Sprintf("the shell command does not parse as %v (%v)", lang, err))
			return
		}
		files[i] = f
	}
	for _, f := range files {
		s.walk(f, src, lv)
	}
}

func (s *shellScript) walk(f *syntax.File, src string, lv level) {
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			if len(n.Assigns) > 0 {
				s.taint("it assigns a variable")
			}
			if len(n.Args) > 0 {
				words := make([]shellWord, len(n.Args))
				for i, w := range n.Args {
					words[i] = resolveWord(w, src)
				}
				s.command(words, lv, "")
			}
		case *syntax.Assign:
			if n.Name != nil && codeVars[n.Name.Value] {
				s.unknown(fmt.Sprintf("it sets %s, whose text the shell runs", n.Name.Value))
			}
		case *syntax.DeclClause:
			s.taint("it declares a variable")
		case *syntax.FuncDecl:
			s.taint("it defines a function")
		case *syntax.WordIter:
			s.taint("a loop assigns a variable")
		case *syntax.ArithmCmd, *syntax.ArithmExp, *syntax.LetClause:
			s.taint("arithmetic may assign variables")
		case *syntax.ParamExp:
			if n.Exp != nil && (n.Exp.Op == syntax.AssignUnset || n.Exp.Op == syntax.AssignUnsetOrNull) {
				s.taint("an expansion assigns a variable")
			}
		case *syntax.Redirect:
			if writes(n) {
				s.taint("it writes a file through a redirection")
			}
		}
		return true
	})
}

// parsers keeps parsers for reuse, by language: a new one costs
// kilobytes of buffers.
var parsers = map[syntax.LangVariant]*sync.Pool{
	syntax.LangPOSIX: {}, syntax.LangBash: {}, syntax.LangMirBSDKorn: {}, syntax.LangZsh: {},
}

func parseShell(src string, lang syntax.LangVariant) (f *syntax.File, err error) {
	// A parser bug on hostile input must not take the process down.
	defer func() {
		if v := recover(); v != nil {
			f, err = nil, fmt.Errorf("parser failed: %v", v)
		}
	}()
	pool := parsers[lang]
	p, _ := pool.Get().(*syntax.Parser)
	if p == nil {
		p = syntax.NewParser(syntax.Variant(lang))
	}
	f, err = p.Parse(strings.NewReader(src), "")
	// A parser is reusable after an error too: Parse resets it.
	pool.Put(p)
	return f, err
}

func writes(r *syntax.Redirect) bool {
	switch r.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrInOut, syntax.RdrClob, syntax.AppClob,
		syntax.RdrAll, syntax.RdrAllClob, syntax.AppAll, syntax.AppAllClob:
	case syntax.DplOut:
		// >&2 duplicates a descriptor; >&file (bash) writes a file.
		if w := resolveWord(r.Word, ""); !w.dynamic && (w.lit == "-" || isDigits(w.lit)) {
			return false
		}
		return true
	default:
		return false
	}
	w := resolveWord(r.Word, "")
	return w.dynamic || w.lit != "/dev/null"
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// codeVars are variables whose value a shell runs or expands as code: the
// prompts (PS4 under set -x), PROMPT_COMMAND, and the files named by
// BASH_ENV and ENV.
var codeVars = map[string]bool{
	"PS1": true, "PS2": true, "PS3": true, "PS4": true, "PROMPT_COMMAND": true, "BASH_ENV": true, "ENV": true,
}

// command records the command words and whatever it runs in turn.
func (s *shellScript) command(words []shellWord, lv level, extra string) {
	if len(words) == 0 {
		return
	}
	w := words[0]
	prog := w.lit
	if !w.dynamic && prog == "" {
		return // "" is no command: the shell runs nothing
	}
	if w.dynamic {
		if w.splits || w.base == "" {
			s.unknown(fmt.Sprintf("the program %s is not known before it runs", w.quoted()))
			return
		}
		prog = w.base
	} else {
		prog = path.Base(prog)
	}
	args := words[1:]
	name := strings.ToLower(prog)
	if wr, ok := wrappers[name]; ok {
		start, why := wr.parse(args)
		s.cmds = append(s.cmds, shellCmd{program: prog, args: args[:min(start, len(args))], extra: extra})
		switch {
		case why != "":
			s.unknown(fmt.Sprintf("%s %s", prog, why))
		case start < len(args) && wr.joins:
			s.script(prog, args[start:], lv.in(posixOrBash))
		case start < len(args):
			inner := extra
			if wr.extra != "" {
				inner = wr.extra
			}
			s.command(args[start:], lv, inner)
		case wr.noCmd != "":
			s.unknown(prog + " " + wr.noCmd)
		}
		return
	}
	s.cmds = append(s.cmds, shellCmd{program: prog, args: args, extra: extra})
	switch {
	case shellLangs[name] != nil:
		s.shell(prog, args, lv.in(shellLangs[name]))
	case name == "eval":
		s.script(prog, args, lv.in(lv.langs))
	case name == "trap":
		a := args
		if len(a) > 0 && !a[0].dynamic && a[0].lit == "--" {
			a = a[1:]
		}
		// trap -p, trap - INT: no script.
		if len(a) > 0 && (a[0].dynamic || !strings.HasPrefix(a[0].lit, "-")) {
			s.script(prog, a[:1], lv.in(lv.langs))
		}
	case name == "su" || name == "runuser":
		s.su(prog, args, lv.in(posixOrBash))
	case name == "find":
		s.find(args, lv, extra)
	case name == "source" || name == ".":
		s.unknown(fmt.Sprintf("%s runs a script file, which a rule cannot read", prog))
	case name == "alias" || name == "enable" || (name == "hash" && len(args) > 0):
		s.unknown(fmt.Sprintf("%s changes what later command names run", prog))
	}
}

// script parses the words, joined by spaces, as a script run by prog.
func (s *shellScript) script(prog string, words []shellWord, lv level) {
	parts := make([]string, len(words))
	for i, w := range words {
		if w.dynamic {
			s.unknown(fmt.Sprintf("%s runs %s, which is not known before it runs", prog, w.quoted()))
			return
		}
		parts[i] = w.lit
	}
	s.analyse(strings.Join(parts, " "), lv)
}

// shell follows sh -c SCRIPT; a shell run on a file or on its input runs
// what a rule cannot see.
func (s *shellScript) shell(prog string, args []shellWord, lv level) {
	dashC := false
	i := 0
	for ; i < len(args); i++ {
		w := args[i]
		if w.dynamic {
			if !dashC && (w.splits || w.lit == "" || w.lit[0] == '-' || w.lit[0] == '+') {
				s.unknown(fmt.Sprintf("%s's argument %s is not known before it runs", prog, w.quoted()))
				return
			}
			break
		}
		if w.lit == "--" || w.lit == "-" {
			i++
			break
		}
		if len(w.lit) < 2 || (w.lit[0] != '-' && w.lit[0] != '+') {
			break
		}
		if strings.HasPrefix(w.lit, "--") {
			if w.lit == "--rcfile" || w.lit == "--init-file" {
				i++
			}
			continue
		}
		if w.lit[0] == '-' && strings.ContainsRune(w.lit, 'c') {
			dashC = true
		}
		if strings.ContainsAny(w.lit[1:], "oO") {
			i++ // -o option
			if i < len(args) && args[i].splits {
				s.unknown(fmt.Sprintf("%s's argument %s is not known before it runs", prog, args[i].quoted()))
				return
			}
		}
	}
	switch {
	case i < len(args) && dashC:
		s.script(prog, args[i:i+1], lv)
	case i < len(args):
		s.unknown(fmt.Sprintf("%s runs the script file %s, which a rule cannot read", prog, args[i].quoted()))
	case !dashC:
		s.unknown(fmt.Sprintf("%s reads the script it runs from its input, which a rule cannot read", prog))
	}
}

// su follows su -c SCRIPT.
func (s *shellScript) su(prog string, args []shellWord, lv level) {
	for i, w := range args {
		switch {
		case w.dynamic && (w.lit == "" || w.lit[0] == '-'):
			s.unknown(fmt.Sprintf("%s's option %s is not known before it runs", prog, w.quoted()))
			return
		case w.lit == "-c" || w.lit == "--command" || w.lit == "--session-command":
			if i+1 < len(args) {
				s.script(prog, args[i+1:i+2], lv)
				return
			}
		case strings.HasPrefix(w.lit, "--command=") || strings.HasPrefix(w.lit, "--session-command="):
			_, v, _ := strings.Cut(w.lit, "=")
			s.analyse(v, lv)
			return
		}
	}
	s.unknown(fmt.Sprintf("%s runs a shell that reads its input, which a rule cannot read", prog))
}

// find follows -exec, -execdir, -ok and -okdir.
func (s *shellScript) find(args []shellWord, lv level, extra string) {
	for i := 0; i < len(args); i++ {
		switch args[i].lit {
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && (args[j].dynamic || (args[j].lit != ";" && args[j].lit != "+")) {
				j++
			}
			s.command(args[i+1:j], lv, extra)
			i = j
		}
	}
}

// wrapper describes a program that runs the command in its arguments: which
// of its options take an argument, how many operands come before the
// command.
type wrapper struct {
	argShort, flagShort string
	argLong, flagLong   []string
	operands            int
	numeric             bool // nice -10
	assigns             bool // env NAME=VALUE
	extra               string
	noCmd               string // why running with no command cannot be judged
	// joins: the command words are joined by spaces and run by a shell
	// (watch, ssh on the remote host).
	joins bool
}

var wrappers = map[string]*wrapper{
	"env": {argShort: "uC", flagShort: "i0v", argLong: []string{"unset", "chdir"},
		flagLong: []string{"ignore-environment", "null", "debug", "ignore-signal", "default-signal", "block-signal", "list-signal-handling"}, assigns: true},
	"sudo": {argShort: "CDghpRrTtUu", flagShort: "AbBEeHiKklNnPSsVv",
		argLong:  []string{"close-from", "chdir", "group", "host", "prompt", "chroot", "role", "type", "command-timeout", "other-user", "user"},
		flagLong: []string{"askpass", "background", "bell", "preserve-env", "edit", "help", "set-home", "login", "remove-timestamp", "reset-timestamp", "list", "non-interactive", "preserve-groups", "stdin", "shell", "validate", "version"}},
	"doas":    {argShort: "uC", flagShort: "ns"},
	"command": {flagShort: "pvV"},
	"builtin": {},
	"exec":    {argShort: "a", flagShort: "cl"},
	"nice":    {argShort: "n", argLong: []string{"adjustment"}, numeric: true},
	"nohup":   {},
	"timeout": {argShort: "sk", flagShort: "v", argLong: []string{"signal", "kill-after"},
		flagLong: []string{"preserve-status", "foreground", "verbose"}, operands: 1},
	"stdbuf": {argShort: "ioe", argLong: []string{"input", "output", "error"}},
	"ionice": {argShort: "cnpPu", flagShort: "t", argLong: []string{"class", "classdata", "pid", "pgid", "uid"}, flagLong: []string{"ignore"}},
	"setsid": {flagShort: "cfw", flagLong: []string{"ctty", "fork", "wait"}},
	"chroot": {argLong: []string{"userspec", "groups"}, flagLong: []string{"skip-chdir"}, operands: 1,
		noCmd: "runs a shell that reads its input, which a rule cannot read"},
	"time": {argShort: "fo", flagShort: "apqv", argLong: []string{"format", "output"},
		flagLong: []string{"append", "portability", "quiet", "verbose"}},
	"xargs": {argShort: "adEILnPs", flagShort: "0eilprtx",
		argLong:  []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"},
		flagLong: []string{"null", "no-run-if-empty", "interactive", "verbose", "exit", "open-tty", "show-limits", "eof", "replace", "max-lines"},
		extra:    "xargs adds arguments it reads from its input, which could be flags"},
	"busybox": {},
	"toybox":  {},
	"watch": {argShort: "nq", flagShort: "bcdegprtwx", argLong: []string{"interval", "equexit"},
		flagLong: []string{"beep", "color", "no-color", "differences", "errexit", "chgexit", "precise", "no-title", "no-wrap", "exec", "no-linewrap"}, joins: true},
	"ssh": {argShort: "BbcDEeFIiJLlmOopQRSWw", flagShort: "46AaCfGgKkMNnqsTtVvXxYy", operands: 1, joins: true,
		noCmd: "opens a remote shell that reads its input, which a rule cannot read"},
}

// parse finds where the wrapped command starts in args; why is set when an
// option cannot be read, so the command cannot be found.
func (wr *wrapper) parse(args []shellWord) (start int, why string) {
	i := 0
	// unknown: a word before the command that may become several words
	// or an option shifts where the command starts.
	unknown := func(w shellWord) (int, string) {
		return 0, fmt.Sprintf("has the argument %s, which is not known before it runs, so the command it runs cannot be found", w.quoted())
	}
	for i < len(args) {
		w := args[i]
		if wr.assigns && !strings.HasPrefix(w.lit, "-") && strings.Contains(w.lit, "=") {
			if w.splits {
				return unknown(w)
			}
			if name, _, _ := strings.Cut(w.lit, "="); codeVars[name] {
				return 0, fmt.Sprintf("sets %s, whose text the shell runs", name)
			}
			i++
			continue
		}
		if w.dynamic {
			if w.splits || w.lit == "" || w.lit[0] == '-' {
				return unknown(w)
			}
			break
		}
		s := w.lit
		if s == "--" {
			i++
			break
		}
		if s == "-" && wr.assigns {
			i++ // env -: env -i
			continue
		}
		if len(s) < 2 || s[0] != '-' {
			break
		}
		takesNext := false
		if name, ok := strings.CutPrefix(s, "--"); ok {
			name, _, hasValue := strings.Cut(name, "=")
			opt, takes := wr.long(name)
			if opt == "" {
				return 0, fmt.Sprintf("has the option %s, which a rule does not know, so the command it runs cannot be found", w.quoted())
			}
			takesNext = takes && !hasValue
		} else if !wr.numeric || !isDigits(s[1:]) {
			for j := 1; j < len(s); j++ {
				c := s[j]
				if strings.IndexByte(wr.argShort, c) >= 0 {
					takesNext = j == len(s)-1
					break
				}
				if strings.IndexByte(wr.flagShort, c) < 0 {
					return 0, fmt.Sprintf("has the option %s, which a rule does not know, so the command it runs cannot be found", w.quoted())
				}
			}
		}
		i++
		if takesNext {
			if i < len(args) && args[i].splits {
				return unknown(args[i])
			}
			i++
		}
	}
	for k := i; k < i+wr.operands && k < len(args); k++ {
		if args[k].splits {
			return unknown(args[k])
		}
	}
	return i + wr.operands, ""
}

// long resolves a long option or an unambiguous abbreviation of one.
func (wr *wrapper) long(name string) (opt string, takesArg bool) {
	if name == "" {
		return "", false
	}
	n := 0
	for _, l := range wr.argLong {
		if l == name {
			return l, true
		}
		if strings.HasPrefix(l, name) {
			opt, takesArg, n = l, true, n+1
		}
	}
	for _, l := range wr.flagLong {
		if l == name {
			return l, false
		}
		if strings.HasPrefix(l, name) {
			opt, takesArg, n = l, false, n+1
		}
	}
	if n != 1 {
		return "", false
	}
	return opt, takesArg
}

// resolveWord removes quotes and escapes as the shell would; at the first
// part only known at run time it stops and marks the word dynamic. src is the
// script, for quoting the word in reasons.
func resolveWord(w *syntax.Word, src string) shellWord {
	if w == nil {
		return shellWord{dynamic: true, splits: true}
	}
	out := shellWord{raw: wordSource(w, src)}
	if len(w.Parts) == 1 {
		if l, ok := w.Parts[0].(*syntax.Lit); ok && !strings.ContainsAny(l.Value, "\\*?[{~") && !strings.HasPrefix(l.Value, "=") {
			out.lit = l.Value
			return out
		}
	}
	if slices.ContainsFunc(w.Parts, func(p syntax.WordPart) bool {
		l, ok := p.(*syntax.Lit)
		return ok && strings.Contains(l.Value, "{")
	}) {
		// Brace expansion ({rm,-rf,x} is three words) is found on a
		// copy: syntax.Walk, still to visit the word, does not know
		// BraceExp nodes.
		cp := *w
		cp.Parts = slices.Clone(w.Parts)
		syntax.SplitBraces(&cp)
		w = &cp
	}
	var b strings.Builder
	// after: static text after the last dynamic part, for base.
	var after strings.Builder
	stop := func(splits bool) {
		if !out.dynamic {
			out.lit = b.String()
		}
		out.dynamic = true
		out.splits = out.splits || splits
		after.Reset()
	}
	write := func(s string) {
		if !out.dynamic {
			b.WriteString(s)
		}
		after.WriteString(s)
	}
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			v := p.Value
			if i == 0 && len(v) > 1 && v[0] == '=' {
				// zsh: =rm is the path of rm.
				stop(false)
				v = "/" + v[1:]
			} else if i == 0 && strings.HasPrefix(v, "~") {
				// ~ and ~user expand to a directory: one word,
				// known only at run time.
				stop(false)
				_, rest, found := strings.Cut(v, "/")
				if !found {
					continue
				}
				v = "/" + rest
			}
			lit, glob := unquoteLit(v)
			write(lit)
			if glob {
				stop(true)
			}
		case *syntax.SglQuoted:
			if p.Dollar && strings.ContainsRune(p.Value, '\\') {
				// $'\x72m' is decoded by bash only: the text is
				// not known without knowing the shell.
				stop(false)
				continue
			}
			write(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				stop(false) // $"…" may be translated at run time
				continue
			}
			for _, q := range p.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					write(unquoteDouble(l.Value))
					continue
				}
				// "$@", "${a[@]}", "${!p@}" are as many words as
				// there are elements, quotes or not.
				pe, isParam := q.(*syntax.ParamExp)
				stop(!isParam || strings.Contains(nodeSource(pe, src), "@"))
			}
		default:
			stop(true)
		}
	}
	if !out.dynamic {
		out.lit = b.String()
	} else if !out.splits {
		if rest := after.String(); strings.Contains(rest, "/") {
			out.base = path.Base(rest)
		}
	}
	return out
}

// unquoteLit removes backslashes from unquoted text, up to a glob (an
// unescaped *, ? or [ … ]), and reports whether it found one.
func unquoteLit(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				b.WriteByte(s[i])
			}
			continue
		case c == '*' || c == '?':
			return b.String(), true
		case c == '[' && strings.IndexByte(s[i:], ']') > 0:
			return b.String(), true
		}
		b.WriteByte(c)
	}
	return b.String(), false
}

// unquoteDouble removes the backslashes that escape within double quotes.
func unquoteDouble(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
			i++
			if s[i] == '\n' {
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// wordSource is the word as written in src.
func wordSource(w *syntax.Word, src string) string { return nodeSource(w, src) }

// nodeSource is a node as written in src, or "" if src is not its script.
func nodeSource(n syntax.Node, src string) string {
	start, end := n.Pos().Offset(), n.End().Offset()
	if start < end && end <= uint(len(src)) {
		return src[start:end]
	}
	return ""
}
