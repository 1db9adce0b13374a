// Package refgen writes the reference pages of docs/reference from the code,
// so that they cannot drift from it: noeta-yaml.md, every key of noeta.yaml,
// and taskfile.md, every key of a task file.
//
// The keys and their types come from the decoders themselves (config.Parse,
// policy.ParseTaskFile), found by handing them small wrong documents and
// reading what they answer ([Explore]): an unknown key makes a decoder name
// the keys it knows, a value of the wrong kind makes it say what the value
// must be, and a missing key that is required makes it say so. What a key
// means, its default and its example come from the doc comments of the Go
// types it decodes into and of the packages, parsed from the source with
// go/parser and go/doc: a field's comment, the YAML blocks of the doc
// comments, and the values of the Default constants they name.
//
// The test regenerates the pages in memory and fails, naming the stale file
// and the command below, when a committed page differs. To regenerate:
//
//	go generate ./internal/refgen
package refgen

//go:generate go run ./cmd/refgen -root ../..

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/noeta-go/noeta"
	"github.com/noeta-go/noeta/config"
	"github.com/noeta-go/noeta/guards"
	"github.com/noeta-go/noeta/internal/hookspec"
	"github.com/noeta-go/noeta/policy"
)

// Command is how to regenerate the pages, from the repository's root.
const Command = "go generate ./internal/refgen"

// Pages returns the reference pages, by their path from the repository's
// root, generated from the source under root.
func Pages(root string) (map[string][]byte, error) {
	y, err := NoetaYAML(root)
	if err != nil {
		return nil, fmt.Errorf("noeta.yaml: %w", err)
	}
	t, err := TaskFile(root)
	if err != nil {
		return nil, fmt.Errorf("task file: %w", err)
	}
	return map[string][]byte{
		filepath.Join("docs", "reference", "noeta-yaml.md"): y,
		filepath.Join("docs", "reference", "taskfile.md"):   t,
	}, nil
}

// configDecoder is config.Parse, its mistakes as Problems.
func configDecoder(doc []byte) []Problem {
	_, err := config.Parse("noeta.yaml", doc)
	return Problems(err, func(err error) (Problem, bool) {
		if e, ok := err.(*config.Error); ok {
			return Problem{Path: e.Path, Msg: e.Msg}, true
		}
		return Problem{}, false
	})
}

// taskFileDecoder is policy.ParseTaskFile, its mistakes as Problems.
func taskFileDecoder(doc []byte) []Problem {
	_, err := policy.ParseTaskFile("task.yaml", doc)
	return Problems(err, func(err error) (Problem, bool) {
		if e, ok := err.(*policy.TaskFileError); ok {
			return Problem{Path: e.Path, Msg: e.Msg}, true
		}
		return Problem{}, false
	})
}

// A binding says which Go types' fields describe the keys of a mapping.
type binding struct {
	types []string
	// aliases maps a key to its field's name where the two differ by more
	// than underscores and case.
	aliases map[string]string
}

var (
	sandboxBinding = binding{types: []string{"config.Sandbox"}}
	// match_arg's operators are the MatchOp constants.
	matchArg = binding{types: []string{"guards.MatchArg", "guards.const"},
		aliases: map[string]string{"equals": "MatchEquals", "contains": "MatchContains", "regex": "MatchRegex"}}
	// FlagsAll's comment is FlagsAny's too.
	matchShell = binding{types: []string{"guards.MatchShell"},
		aliases: map[string]string{"program": "Programs", "flags_any": "FlagsAll"}}
)

// noetaBindings are the Go types each mapping of noeta.yaml decodes into.
var noetaBindings = map[string]binding{
	"":                                   {types: []string{"config.File"}},
	"agents.<name>":                      {types: []string{"guards.AgentConfig", "config.AgentModel"}},
	"agents.<name>.budget":               {types: []string{"guards.BudgetLimits"}},
	"agents.<name>.permissions":          {types: []string{"guards.PermissionPolicy"}},
	"agents.<name>.repetition":           {types: []string{"guards.RepetitionPolicy"}},
	"agents.<name>.rate_limits[]":        {types: []string{"guards.RateLimit"}},
	"agents.<name>.sandbox":              sandboxBinding,
	"sandbox":                            sandboxBinding,
	"mcp_servers.<name>.sandbox":         sandboxBinding,
	"rules[]":                            {types: []string{"guards.Rule"}},
	"guards[].rules[]":                   {types: []string{"guards.Rule"}},
	"guards[]":                           {types: []string{"guards.RuleSet"}},
	"hooks":                              {types: []string{"config.Hooks"}},
	"hooks.post_tool_use[]":              {types: []string{"hookspec.ToolHook"}, aliases: map[string]string{"timeout_seconds": "Timeout"}},
	"hooks.notification[]":               {types: []string{"hookspec.NotificationHook"}, aliases: map[string]string{"timeout_seconds": "Timeout"}},
	"observers":                          {types: []string{"config.Observers"}},
	"observers.audit":                    {types: []string{"config.Audit"}},
	"observers.metrics":                  {types: []string{"config.Metrics"}},
	"observers.trace":                    {types: []string{"config.Trace"}, aliases: map[string]string{"otlp_endpoint": "Endpoint"}},
	"observers.fanout":                   {types: []string{"config.Fanout"}},
	"models.<name>":                      {types: []string{"config.Model"}},
	"models.<name>.price":                {types: []string{"config.Price"}},
	"mcp_servers.<name>":                 {types: []string{"config.MCPServer"}},
	"mcp_servers.<name>.tools.<name>":    {types: []string{"config.MCPTool"}},
	"approvals":                          {types: []string{"approvals.Config"}},
	"approvals.rules[]":                  {types: []string{"approvals.Rule"}},
	"http":                               {types: []string{"config.HTTP"}},
	"http.tokens[]":                      {types: []string{"config.HTTPToken"}},
	"http.trusted_proxy":                 {types: []string{"config.TrustedProxy"}},
	"rules[].match_arg":                  matchArg,
	"guards[].rules[].match_arg":         matchArg,
	"rules[].match_shell":                matchShell,
	"guards[].rules[].match_shell":       matchShell,
	"agents.<name>.sandbox.limits":       {types: []string{"config.SandboxLimits"}},
	"sandbox.limits":                     {types: []string{"config.SandboxLimits"}},
	"mcp_servers.<name>.sandbox.limits":  {types: []string{"config.SandboxLimits"}},
	"agents.<name>.sandbox.network":      {types: []string{"config.SandboxNetwork"}},
	"sandbox.network":                    {types: []string{"config.SandboxNetwork"}},
	"mcp_servers.<name>.sandbox.network": {types: []string{"config.SandboxNetwork"}},
}

// noetaContext gives the siblings a key is only checked beside.
var noetaContext = map[string]map[string]any{
	"mcp_servers.<name>.args":      {"command": "server"},
	"hooks.notification[].headers": {"url": "https://hooks.example.com"},
}

// constants are the values of the Default constants a doc comment may name,
// taken from the code, by "pkg.Name".
var constants = map[string]string{
	"config.DefaultMaxTokens":         strconv.Itoa(config.DefaultMaxTokens),
	"config.DefaultTimeoutSeconds":    strconv.Itoa(config.DefaultTimeoutSeconds),
	"config.DefaultMaxRetries":        strconv.Itoa(config.DefaultMaxRetries),
	"config.DefaultMaxContextChars":   strconv.Itoa(config.DefaultMaxContextChars),
	"config.DefaultMCPTimeoutSeconds": strconv.Itoa(config.DefaultMCPTimeoutSeconds),
	"config.DefaultHookRetries":       strconv.Itoa(config.DefaultHookRetries),
	"config.DefaultHookTimeout":       seconds(config.DefaultHookTimeout),
	"hookspec.DefaultRetries":         strconv.Itoa(hookspec.DefaultRetries),
	"hookspec.DefaultTimeout":         seconds(hookspec.DefaultTimeout),
	"guards.DefaultRepetitionWindow":  strconv.Itoa(guards.DefaultRepetitionWindow),
}

// goValues are the Go names a doc comment may give a default by, with the
// value the file writes, taken from the code.
var goValues = map[string]string{
	"VerdictAllow":           noeta.VerdictAllow.String(),
	"VerdictDeny":            noeta.VerdictDeny.String(),
	"VerdictRequireApproval": noeta.VerdictRequireApproval.String(),
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// An entry is one key of a reference page, resolved.
type entry struct {
	Key
	example string
	def     string
	doc     string
}

var defaultName = regexp.MustCompile(`\bDefault[A-Z][A-Za-z]*\b`)

// resolve finds what each key means, its default and its example in the
// doc comments.
func resolve(keys []Key, src *sources, bindings map[string]binding, extra func(Key) string) ([]entry, error) {
	exs := src.examples(keys)
	var errs []error
	out := make([]entry, 0, len(keys))
	for _, k := range keys {
		e := entry{Key: k}
		parent, name := splitPath(k.Path)
		ex := exs[k.Path]
		var typ string
		if b, ok := bindings[parent]; ok {
			var field, text string
			typ, field, text = src.field(b.types, name, b.aliases)
			if text != "" {
				e.doc = leadWithKey(prose(text), field, name)
			}
		}
		if e.doc == "" && extra != nil {
			e.doc = extra(k)
		}
		if ex.from != "" {
			// An example borrowed from another key: its note is about that
			// key (the top-level sandbox's default is not an agent's).
			ex.comment = ""
		}
		own := e.doc
		if e.doc == "" {
			e.doc = ex.comment
		} else if ex.comment != "" && !strings.Contains(e.doc, ex.comment) {
			e.doc += " Example's note: " + ex.comment + "."
		}
		if e.doc == "" && k.Required != "" {
			e.doc = "Required" + strings.TrimPrefix(k.Required, "required") + "."
		}
		if e.doc == "" {
			errs = append(errs, fmt.Errorf("%s: nothing says what it means: give its Go field a doc comment, or its line in a doc comment's YAML example a comment", k.Path))
		}
		def, err := defaultOf(keys, e, own, ex, typ)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k.Path, err))
		}
		e.def = def
		e.example = ex.value
		if len(e.example) > 80 && hasChildren(keys, k.Path) {
			e.example = "" // its keys' examples follow
		}
		if e.example != "" {
			e.example = name + ": " + e.example
		} else if hasChildren(keys, k.Path) {
			e.example = ""
		} else {
			e.example = name + ": " + fromType(k)
		}
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

func hasChildren(keys []Key, path string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k.Path, path+".") || strings.HasPrefix(k.Path, path+"[]") {
			return true
		}
	}
	return false
}

// splitPath splits a key's pattern into its mapping's and its own name.
func splitPath(p string) (parent, name string) {
	i := strings.LastIndex(p, ".")
	if i < 0 {
		return "", p
	}
	return p[:i], p[i+1:]
}

// leadWithKey writes a doc comment that starts with its Go field's name
// ("MaxTokens bounds each reply") with the YAML key instead.
func leadWithKey(text, field, key string) string {
	if field != "" && (strings.HasPrefix(text, field+" ") || strings.HasPrefix(text, field+",")) {
		return "`" + key + "`" + strings.TrimPrefix(text, field)
	}
	return text
}

// defaultPhrases are the ways the doc comments say what a default is, the
// most precise first; the first group is the value. Each is looked for in
// the key's own doc comment, then in its example's note.
var defaultPhrases = []*regexp.Regexp{
	regexp.MustCompile(`\((\w+) by default\)`),  // "(false by default)"
	regexp.MustCompile(`(\w+) \(default\)`),     // "allow (default)"
	regexp.MustCompile(`(\w+) \(the default\)`), // "grpc (the default)"
	regexp.MustCompile(`\bdefault (\w+)\)`),     // "(1..16, default 1)"
	regexp.MustCompile(`\(0: ([^)]+)\)`),        // "(0: the model's)"
	regexp.MustCompile(`unset means (\w+)`),     // "unset means VerdictRequireApproval"
	regexp.MustCompile(`"" is ([^;.(]+)`),       // "\"\" is the provider's own"
	// A clause of its own: "per call; 60 by default".
	regexp.MustCompile(`(?:^|; )([^;:().]+?) by default`),
}

// defaultOf is a key's default: the value of a Default constant its doc
// names, the example's value when the example's note calls it the
// default, a clause of its doc or note that says what the default is,
// "required", or "unset" (absent: what that means is in its description).
func defaultOf(keys []Key, e entry, own string, ex example, typ string) (string, error) {
	pkg, _, _ := strings.Cut(typ, ".")
	for _, name := range defaultName.FindAllString(e.doc+" "+ex.comment, -1) {
		v, ok := constants[pkg+"."+name]
		if !ok {
			v, ok = constants["config."+name]
		}
		if !ok {
			return "", fmt.Errorf("its doc names %s, which refgen's constants do not hold: add it there", name)
		}
		return v + " (`" + name + "`)", nil
	}
	if strings.HasPrefix(ex.comment, "the default") {
		return ex.value, nil
	}
	for _, re := range defaultPhrases {
		for _, text := range []string{own, ex.comment} {
			if leaf := !hasChildren(keys, e.Path); !leaf && strings.Contains(re.String(), "the default") {
				continue // a section's "(the default)" is about one of its keys
			}
			if m := re.FindStringSubmatch(text); m != nil {
				v := strings.TrimSpace(m[1])
				if w, ok := goValues[v]; ok {
					v = w + " (`" + v + "`)"
				}
				return v, nil
			}
		}
	}
	if e.Required != "" {
		return "required", nil
	}
	return "unset", nil
}

// fromType is an example built from a key's type, where no doc comment
// shows one.
func fromType(k Key) string {
	switch {
	case strings.HasPrefix(k.Type, "a string"):
		return `"text"`
	case k.Type == "an integer":
		return "1"
	case k.Type == "a number":
		return "1.5"
	case k.Type == "true or false":
		return "true"
	case strings.HasPrefix(k.Type, "a list of strings"):
		return "[a, b]"
	case strings.HasPrefix(k.Type, "a mapping of names to strings"):
		return "{NAME: value}"
	case strings.HasPrefix(k.Type, "a list"):
		return "[...]"
	}
	return "{...}"
}

func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

func code(s string) string {
	if s == "" {
		return ""
	}
	if strings.Contains(s, "`") {
		return "``" + cell(s) + "``"
	}
	return "`" + cell(s) + "`"
}

// table writes entries as a Markdown table.
func table(b *bytes.Buffer, entries []entry) {
	b.WriteString("| key | type | default | example | what it is |\n|---|---|---|---|---|\n")
	for _, e := range entries {
		typ := e.Type
		if e.Same != "" {
			typ += ", as `" + e.Same + "`"
		}
		def := e.def
		if def != "unset" && def != "required" && !strings.Contains(def, "`") && !strings.Contains(def, " ") {
			def = code(def)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", code(e.Path), cell(typ), cell(def), code(e.example), cell(e.doc))
	}
}

// header is the note every page opens with.
func header(b *bytes.Buffer, title, from string) {
	fmt.Fprintf(b, "# %s\n\n", title)
	fmt.Fprintf(b, "<!-- Generated by %s from %s. Do not edit: change the doc comments, then regenerate. -->\n\n", Command, from)
}

// sections groups entries by their top-level key, in the decoder's order.
func sections(entries []entry) (names []string, by map[string][]entry) {
	by = map[string][]entry{}
	for _, e := range entries {
		top := e.Path
		if i := strings.IndexAny(top, ".["); i >= 0 {
			top = top[:i]
		}
		if !slices.Contains(names, top) {
			names = append(names, top)
		}
		by[top] = append(by[top], e)
	}
	return names, by
}
