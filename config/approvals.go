package config

import (
	"time"

	"github.com/noeta-go/noeta/approvals"
	"go.yaml.in/yaml/v3"
)

// The approvals: section and the agents' approval_timeout (package
// approvals compiles them):
//
//	approvals:
//	  self_approval: deny            # allow (default) | deny
//	  rules:
//	    - name: sre-approves-shell
//	      when: 'tool == "shell"'
//	      approvers: 'approver in ["sre", "alice"]'
//	      quorum: 2
//	      timeout: 30m
//	      self_approval: deny
//	agents:
//	  researcher: {approval_timeout: 1h}

func (d *decoder) approvals(n *yaml.Node, path string) approvals.Config {
	var out approvals.Config
	f, ok := d.fields(n, path, "self_approval", "rules")
	if !ok && f == nil {
		return out
	}
	if s, ok := d.str(f["self_approval"], join(path, "self_approval")); ok {
		out.SelfApproval = approvals.SelfApproval(s)
	}
	for i, it := range d.seq(f["rules"], join(path, "rules")) {
		p := index(join(path, "rules"), i)
		rf, ok := d.fields(it, p, "name", "when", "approvers", "quorum", "timeout", "self_approval")
		if !ok && rf == nil {
			out.Rules = append(out.Rules, approvals.Rule{Name: "-"})
			continue
		}
		var r approvals.Rule
		r.Name, _ = d.str(rf["name"], join(p, "name"))
		r.When, _ = d.str(rf["when"], join(p, "when"))
		r.Approvers, _ = d.str(rf["approvers"], join(p, "approvers"))
		if q, ok := d.integer(rf["quorum"], join(p, "quorum")); ok && q != nil {
			if *q < 1 || *q > approvals.MaxQuorum {
				d.errs.addf(join(p, "quorum"), "must be 1 to %d, not %d", approvals.MaxQuorum, *q)
			} else {
				r.Quorum = *q
			}
		}
		r.Timeout = d.duration(rf["timeout"], join(p, "timeout"))
		if s, ok := d.str(rf["self_approval"], join(p, "self_approval")); ok {
			r.SelfApproval = approvals.SelfApproval(s)
		}
		out.Rules = append(out.Rules, r)
	}
	return out
}

// duration reads a Go duration string (30m, 1h30m) that must be > 0 and at
// most approvals.MaxTimeout; null is absent (0), and so is a bad value,
// reported.
func (d *decoder) duration(n *yaml.Node, path string) time.Duration {
	s, ok := d.str(n, path)
	if !ok {
		return 0
	}
	v, err := time.ParseDuration(s)
	switch {
	case err != nil:
		d.errs.addf(path, "%q is not a duration (write it like 45s, 30m or 1h30m)", s)
		return 0
	case v <= 0 || v > approvals.MaxTimeout:
		d.errs.addf(path, "must be > 0 and at most %s, not %s", approvals.MaxTimeout, s)
		return 0
	}
	return v
}

// compileApprovals compiles the section, placing each mistake at its line.
func compileApprovals(c approvals.Config, errs *errorList) *approvals.Policy {
	p, err := approvals.Compile(c)
	if err == nil {
		return p
	}
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	for _, one := range list {
		if ce, ok := one.(*approvals.ConfigError); ok {
			errs.add(ce.Path, ce.Msg)
			continue
		}
		errs.add("approvals", one.Error())
	}
	return nil
}
