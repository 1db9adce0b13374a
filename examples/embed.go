// Package examples holds the example task files and the governance config
// they run under (noeta.yaml): one task per governance path — an allowed
// call, a budget denial, a permission denial, a rule denial, a repetition
// that asks for approval, an approval granted, an approval refused, and a
// fan-out to subtasks. The README points at them and `engine demo` runs them
// all; FS embeds them so the demo needs no checkout.
package examples

import "embed"

// FS holds every *.yaml file of this directory: the task files NN-*.yaml and
// noeta.yaml.
//
//go:embed *.yaml
var FS embed.FS
