package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/noeta-go/noeta/internal/boundedio"
	"github.com/noeta-go/noeta/internal/natsconn"
)

// Settings come from three places, the first that has one winning: a flag
// on the command line, an environment variable NOETA_<KEY>, and (serve only)
// the serve config file (--serve-config, YAML or JSON) under <key>. The
// connection settings are read from the environment by every verb; the
// others, and the file, only by serve.

type settingKind int

const (
	kindString settingKind = iota
	kindInt
	kindDuration
	kindBool
)

// setting is one configurable value: the key in the serve config file; the
// flag is the key with - for _, the environment variable NOETA_ and the key
// in capitals.
type setting struct {
	key  string
	kind settingKind
	// conn: the environment applies to every verb, not only serve.
	conn bool
	// secret values are not printed.
	secret bool
}

var settings = []setting{
	{key: "nats", conn: true},
	{key: "creds", conn: true},
	{key: "user", conn: true},
	{key: "password", conn: true, secret: true},
	{key: "tls_ca", conn: true},
	{key: "tls_cert", conn: true},
	{key: "tls_key", conn: true},
	{key: "prefix", conn: true},
	{key: "replicas", kind: kindInt, conn: true},
	{key: "lease_ttl", kind: kindDuration, conn: true},
	{key: "batch", conn: true},
	{key: "workers", kind: kindInt},
	{key: "queue"},
	{key: "grace", kind: kindDuration},
	{key: "http"},
	{key: "http_tls_cert"},
	{key: "http_tls_key"},
	{key: "behind_tls_proxy", kind: kindBool},
	{key: "max_streams", kind: kindInt},
	{key: "max_streams_per_client", kind: kindInt},
	{key: "config"},
	{key: "workspace"},
	{key: "data"},
	{key: "child", kind: kindBool},
	{key: "hooks", kind: kindBool},
	{key: "audit", kind: kindBool},
	{key: "log_format"},
	{key: "log_level"},
}

func (s setting) flag() string { return strings.ReplaceAll(s.key, "_", "-") }
func (s setting) env() string  { return "NOETA_" + strings.ToUpper(s.key) }

// envServeConfig names the serve config file when --serve-config does not.
const envServeConfig = "NOETA_SERVE_CONFIG"

// settingKeys lists the keys of the serve config file.
func settingKeys() []string {
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = s.key
	}
	return keys
}

// envList is the environment variables a verb reads, for its help.
func envList(serve bool) string {
	var names []string
	for _, s := range settings {
		if s.conn || serve {
			names = append(names, s.env())
		}
	}
	if serve {
		names = append(names, envServeConfig)
	}
	return wrapWords(strings.Join(names, ", "), 76, "  ")
}

func wrapWords(s string, width int, indent string) string {
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

// sources records where each setting of a run came from: "flag", "env
// NOETA_X", the config file's name, or "default".
type sources map[string]string

// applySettings fills every flag of cmd that was not given on the command
// line from the environment, then (serve) from the config file. Errors name
// the variable, or the file, line and key, and are usage errors; every one
// is reported, not only the first, so one run shows everything to fix.
func applySettings(cmd *cobra.Command, serve bool, file string, lookupEnv func(string) (string, bool)) (sources, error) {
	src := sources{}
	var fileVals map[string]*yaml.Node
	var errs []string
	if file != "" {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		if fileVals, errs = readSettingsFile(ctx, file); fileVals == nil {
			return nil, usageErr("%s", strings.Join(errs, "\n"))
		}
	}
	for _, s := range settings {
		fl := cmd.Flags().Lookup(s.flag())
		if fl == nil {
			continue
		}
		if fl.Changed {
			src[s.key] = "flag --" + s.flag()
			continue
		}
		if s.conn || serve {
			if v, ok := lookupEnv(s.env()); ok && v != "" {
				if err := setFlag(fl, s, v); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", s.env(), err))
				}
				src[s.key] = "env " + s.env()
				continue
			}
		}
		if n, ok := fileVals[s.key]; ok {
			v, err := nodeValue(n, s)
			if err == nil {
				err = setFlag(fl, s, v)
			}
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s: %v (line %d)", file, s.key, err, n.Line))
			}
			src[s.key] = file
			continue
		}
		src[s.key] = "default"
	}
	if len(errs) > 0 {
		return nil, usageErr("%s", strings.Join(errs, "\n"))
	}
	return src, nil
}

// maxServeConfigSize is the largest serve config file read: a mapping of a
// score of scalars needs a few hundred bytes.
const maxServeConfigSize = 64 << 10

// readSettingsFile reads a serve config file: a YAML (or JSON) mapping of
// known keys to scalars, a regular file of at most maxServeConfigSize bytes.
// It returns the values and every mistake found, FILE: key: message (line N); a
// nil map when the file could not be read as a mapping at all.
func readSettingsFile(ctx context.Context, path string) (map[string]*yaml.Node, []string) {
	data, err := boundedio.ReadFile(ctx, path, maxServeConfigSize)
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
	keys := settingKeys()
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
func nodeValue(n *yaml.Node, s setting) (string, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", fmt.Errorf("must be a single value, not a %s", nodeKind(n))
	}
	switch s.kind {
	case kindInt:
		if n.Tag != "!!int" {
			return "", fmt.Errorf("must be a number, not %q", n.Value)
		}
	case kindBool:
		if n.Tag != "!!bool" {
			return "", fmt.Errorf("must be true or false, not %q", n.Value)
		}
	case kindDuration:
		if n.Tag == "!!int" || n.Tag == "!!float" {
			return "", fmt.Errorf("must be a duration with its unit, such as 30s or 1m, not %s", n.Value)
		}
	}
	return n.Value, nil
}

// setFlag checks v against the setting's kind, then sets the flag (which
// stays not Changed: the command line did not give it).
func setFlag(fl *pflag.Flag, s setting, v string) error {
	switch s.kind {
	case kindInt:
		if _, err := strconv.Atoi(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("must be a number, not %q", v)
		}
		v = strings.TrimSpace(v)
	case kindDuration:
		if _, err := time.ParseDuration(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("must be a duration such as 30s or 1m, not %q", v)
		}
		v = strings.TrimSpace(v)
	case kindBool:
		if _, err := strconv.ParseBool(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("must be true or false, not %q", v)
		}
		v = strings.TrimSpace(v)
	}
	return fl.Value.Set(v)
}

// printSettings writes every setting of cmd with its value and source.
func printSettings(w io.Writer, cmd *cobra.Command, src sources) {
	for _, s := range settings {
		fl := cmd.Flags().Lookup(s.flag())
		if fl == nil {
			continue
		}
		v := fl.Value.String()
		if s.kind == kindString {
			v = strconv.Quote(v)
		}
		if s.secret && fl.Value.String() != "" {
			v = `"(set)"`
		}
		if s.key == "nats" {
			v = strconv.Quote(natsconn.RedactURL(fl.Value.String()))
		}
		fmt.Fprintf(w, "%-10s %-32s %s\n", s.key, v, src[s.key])
	}
}
