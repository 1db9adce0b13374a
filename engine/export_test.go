package engine

import (
	"context"

	"github.com/noeta-go/noeta"
)

// ChildIDs exposes the derivation of a spawn's child ids, so a test can
// create a child before its parent's spawn does (as a spawn that was cut
// short and resumed finds it).
func ChildIDs(parent string, turn, n int) []string { return childIDs(parent, turn, n) }

// Allotments exposes how a spawn of n children, in the turn st is at,
// carves their allotments.
func Allotments(e *Engine, st *State, n int) ([]*noeta.BudgetAllotment, error) {
	g := &segment{e: e, ctx: context.Background(), st: st}
	return g.allotments(n)
}

// CPUTime and ReportCPU are cpuTime and reportCPU for the benchmarks of
// the external test package.
var (
	CPUTime   = cpuTime
	ReportCPU = reportCPU
)
