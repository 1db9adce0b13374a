//go:build race

package main

// raceEnabled: the test binary runs under the race detector, and so does the
// engine binary it builds for its subprocesses.
const raceEnabled = true
