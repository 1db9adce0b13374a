package guards

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// ObserversConfig is the observers: section of noeta.yaml: the observers a
// process that runs tasks runs in process, beside the hooks: section. Like
// hooks, guards only parses and validates it; package observers builds the
// observers and the binary wires them.
//
//	observers:
//	  audit: {file: audit.jsonl}     # or {stdout: true}, or {subject: noeta.audit}
type ObserversConfig struct {
	// Audit is the audit observer's sink; nil: no audit section.
	Audit *AuditSinkConfig
}

// AuditSinkConfig is observers.audit: exactly one of its fields is set.
type AuditSinkConfig struct {
	// File is a JSON Lines file, relative to the working directory.
	File string
	// Stdout writes the records to standard output.
	Stdout bool
	// Subject publishes each record on <Subject>.<task>.
	Subject string
}

// Empty reports whether the section configures nothing.
func (o ObserversConfig) Empty() bool { return o.Audit == nil }

// Observers returns the config's observers: section (empty if the file had
// none).
func (c *Config) Observers() ObserversConfig {
	out := c.observers
	if out.Audit != nil {
		a := *out.Audit
		out.Audit = &a
	}
	return out
}

// ErrorAt is a mistake found in the config after it was parsed (say, an
// audit file that cannot be opened), as a [*ConfigError] naming path and,
// for a parsed config, the line and column path is at.
func (c *Config) ErrorAt(path, msg string) *ConfigError {
	ce := &ConfigError{Path: path, Msg: msg}
	for p := path; c.pos != nil && p != ""; p = parentPath(p) {
		if lc, ok := c.pos[p]; ok {
			ce.Line, ce.Column = lc[0], lc[1]
			break
		}
	}
	return ce
}

func (d *decoder) observers(n *yaml.Node, path string) ObserversConfig {
	var o ObserversConfig
	f, ok := d.fields(n, path, "audit")
	if !ok && f == nil {
		return o
	}
	an, ok := f["audit"]
	if !ok || isNull(an) {
		return o
	}
	ap := join(path, "audit")
	af, ok := d.fields(an, ap, "file", "stdout", "subject")
	if !ok && af == nil {
		// Refused already; a placeholder keeps "no audit" from being read
		// as the user's choice.
		o.Audit = &AuditSinkConfig{}
		return o
	}
	a := &AuditSinkConfig{}
	// A sink counts as given when its key is, even with a value refused
	// below: that error says what is wrong, not "no sink".
	var set []string
	for _, k := range []string{"file", "stdout", "subject"} {
		if v, given := af[k]; given && !isNull(v) {
			set = append(set, k)
		}
	}
	if s, ok := d.str(af["file"], join(ap, "file")); ok {
		a.File = s
		if s == "" {
			d.errs.add(join(ap, "file"), "must not be empty")
		}
	}
	if b, ok := d.boolean(af["stdout"], join(ap, "stdout")); ok {
		if !b {
			d.errs.add(join(ap, "stdout"), "must be true, or left out")
		}
		a.Stdout = b
	}
	if s, ok := d.str(af["subject"], join(ap, "subject")); ok {
		a.Subject = s
		if s == "" {
			d.errs.add(join(ap, "subject"), "must not be empty")
		}
	}
	if len(set) != 1 && ok {
		if len(set) == 0 {
			d.errs.add(ap, "needs exactly one sink: file, stdout or subject")
		} else {
			d.errs.addf(ap, "needs exactly one sink, has %s", strings.Join(set, " and "))
		}
	}
	o.Audit = a
	return o
}

// boolean reads a bool; null is absent.
func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	if n = d.enter(n, path); isNull(n) {
		return false, false
	}
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.errs.addf(path, "must be true or false, not %s", kindName(n))
		return false, false
	}
	return v, true
}
