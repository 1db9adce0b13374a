// Package memtest measures what a call allocates, for tests and fuzz
// targets that hold a parser to a memory ceiling.
package memtest

import "runtime"

// Allocated returns how many bytes of heap f allocated, freed or not: an
// upper bound on the heap it held at its peak. Other goroutines' allocations
// count too, so call it where nothing else runs (a fuzz target, a test that
// is not parallel).
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Ceiling is the most a reader may allocate for an input of n bytes: a
// fixed allowance (alias expansion up to the decoders' node limits, buffers)
// plus a few hundred bytes per input byte, the cost of a YAML node tree.
func Ceiling(n int) uint64 { return 64<<20 + 256*uint64(n) }
