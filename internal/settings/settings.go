// Package settings gives a program's flags two more sources, the first that
// has a value winning: a flag on the command line, an environment variable
// NOETA_<KEY>, and a settings file (YAML or JSON) under <key>. Connection
// settings are read from the environment by every command, the others only
// by a command that reads them all (serve). Values are checked against their
// kind before a flag is set, and every mistake is reported, naming the
// variable, or the file, key and line.
package settings

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/noeta-go/noeta/internal/boundedio"
)

// Kind is the type of a setting's value, checked before the flag is set.
type Kind int

const (
	String Kind = iota
	Int
	Duration
	Bool
)

// Setting is one configurable value: the key in the settings file; the
// flag is the key with - for _, the environment variable NOETA_ and the key
// in capitals.
type Setting struct {
	Key  string
	Kind Kind
	// Conn: the environment applies to every command, not only to those
	// that read every setting (serve).
	Conn bool
	// Secret values are not printed.
	Secret bool
	// Show, if set, is how the value is printed (a URL without its
	// password).
	Show func(string) string
}

// Table is every setting of a program.
type Table []Setting

// Flag is the setting's flag name.
func (s Setting) Flag() string { return strings.ReplaceAll(s.Key, "_", "-") }

// Env is the setting's environment variable.
func (s Setting) Env() string { return "NOETA_" + strings.ToUpper(s.Key) }

// Keys lists the keys of the settings file.
func (t Table) Keys() []string {
	keys := make([]string, len(t))
	for i, s := range t {
		keys[i] = s.Key
	}
	return keys
}

// EnvList is the environment variables a command reads, for its help:
// every setting's with all, else the connection's; then extra.
func (t Table) EnvList(all bool, extra ...string) string {
	var names []string
	for _, s := range t {
		if s.Conn || all {
			names = append(names, s.Env())
		}
	}
	names = append(names, extra...)
	return WrapWords(strings.Join(names, ", "), 76, "  ")
}

// WrapWords fills lines of at most width bytes with the words of s, each
// line begun with indent.
func WrapWords(s string, width int, indent string) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(s) {
		if len(line)+len(w)+1 > width && strings.TrimSpace(line) != "" {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = indent
		}
		line += w + " "
	}
	b.WriteString(strings.TrimRight(line, " "))
	return b.String()
}

// Sources records where each setting of a run came from: "flag --x", "env
// NOETA_X", the settings file's name, or "default".
type Sources map[string]string

// Apply fills every flag of flags that was not given on the command line
// from the environment (a connection setting's, or with all any setting's),
// then from the settings file, if one is named. Errors name the variable,
// or the file, line and key; every one is reported, one a line, not only
// the first, so one run shows everything to fix.
func (t Table) Apply(ctx context.Context, flags *pflag.FlagSet, all bool, file string, lookupEnv func(string) (string, bool)) (Sources, error) {
	src := Sources{}
	var fileVals map[string]*yaml.Node
	var errs []string
	if file != "" {
		if fileVals, errs = t.readFile(ctx, file); fileVals == nil {
			return nil, errors.New(strings.Join(errs, "\n"))
		}
	}
	for _, s := range t {
		fl := flags.Lookup(s.Flag())
		if fl == nil {
			continue
		}
		if fl.Changed {
			src[s.Key] = "flag --" + s.Flag()
			continue
		}
		if s.Conn || all {
			if v, ok := lookupEnv(s.Env()); ok && v != "" {
				if err := setFlag(fl, s, v); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", s.Env(), err))
				}
				src[s.Key] = "env " + s.Env()
				continue
			}
		}
		if n, ok := fileVals[s.Key]; ok {
			v, err := nodeValue(n, s)
			if err == nil {
				err = setFlag(fl, s, v)
			}
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s: %v (line %d)", file, s.Key, err, n.Line))
			}
			src[s.Key] = file
			continue
		}
		src[s.Key] = "default"
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	return src, nil
}

// MaxFileSize is the largest settings file read: a mapping of a
// score of scalars needs a few hundred bytes.
const MaxFileSize = 64 << 10

// readFile reads a settings file: a YAML (or JSON) mapping of
// known keys to scalars, a regular file of at most MaxFileSize bytes.
// It returns the values and every mistake found, FILE: key: message (line N); a
// nil map when the file could not be read as a mapping at all.
func (t Table) readFile(ctx context.Context, path string) (map[string]*yaml.Node, []string) {
	data, err := boundedio.ReadFile(ctx, path, MaxFileSize)
	if err != nil {
		return nil, []string{fmt.Sprintf("--serve-config: %v", err)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	out := map[string]*yaml.Node{}
	if len(doc.Content) == 0 {
		return out, nil // an empty file
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, []string{fmt.Sprintf("%s: want a mapping of settings (key: value), not a %s", path, nodeKind(m))}
	}
	keys := t.Keys()
	var errs []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if !slices.Contains(keys, k.Value) {
			errs = append(errs, fmt.Sprintf("%s: %s: unknown key (line %d; the keys: %s)", path, k.Value, k.Line, strings.Join(keys, ", ")))
			continue
		}
		if _, dup := out[k.Value]; dup {
			errs = append(errs, fmt.Sprintf("%s: %s: given twice (line %d)", path, k.Value, k.Line))
			continue
		}
		out[k.Value] = v
	}
	return out, errs
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	}
	return "scalar"
}

// nodeValue is the text of a file value, checked against the setting's
// kind: the file is typed, so a number must be written as one.
func nodeValue(n *yaml.Node, s Setting) (string, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", fmt.Errorf("must be a single value, not a %s", nodeKind(n))
	}
	switch s.Kind {
	case Int:
		if n.Tag != "!!int" {
			return "", fmt.Errorf("must be a number, not %q", n.Value)
		}
	case Bool:
		if n.Tag != "!!bool" {
			return "", fmt.Errorf("must be true or false, not %q", n.Value)
		}
	case Duration:
		if n.Tag == "!!int" || n.Tag == "!!float" {
			return "", fmt.Errorf("must be a duration with its unit, such as 30s or 1m, not %s", n.Value)
		}
	}
	return n.Value, nil
}

// setFlag checks v against the setting's kind, then sets the flag (which
// stays not Changed: the command line did not give it).
func setFlag(fl *pflag.Flag, s Setting, v string) error {
	switch s.Kind {
	case Int:
		if _, err := strconv.Atoi(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("must be a number, not %q", v)
		}
		v = strings.TrimSpace(v)
	case Duration:
		if _, err := time.ParseDuration(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("must be a duration such as 30s or 1m, not %q", v)
		}
		v = strings.TrimSpace(v)
	case Bool:
		if _, err := strconv.ParseBool(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("must be true or false, not %q", v)
		}
		v = strings.TrimSpace(v)
	}
	return fl.Value.Set(v)
}

// Print writes every setting of flags with its value and source, aligned.
// effective holds, by key, the value a setting takes in effect where its
// flag's own says less (a 0 that means 30s, an empty path that means a
// default one); it is printed in its place.
func (t Table) Print(w io.Writer, flags *pflag.FlagSet, src Sources, effective map[string]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for _, s := range t {
		fl := flags.Lookup(s.Flag())
		if fl == nil {
			continue
		}
		raw := fl.Value.String()
		if e, ok := effective[s.Key]; ok {
			raw = e
		}
		v := raw
		if s.Kind == String {
			v = strconv.Quote(v)
		}
		if s.Secret && fl.Value.String() != "" {
			v = `"(set)"`
		}
		if s.Show != nil {
			v = strconv.Quote(s.Show(raw))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, v, src[s.Key])
	}
	_ = tw.Flush()
}
