package service

import (
	"os"
	"runtime/debug"
)

// DefaultGCPercent is the garbage collector's target (GOGC) of Ferry's
// server processes when the GOGC environment variable is not set.
//
// Ferry's processes allocate per record (decoded events, encoded records,
// Kafka batches) and keep a small live heap, so at Go's default of 100 the
// collector runs many times a second under load: marking, assists and the
// stack regrowth after each cycle's stack shrinking were ~15-20 % of the
// all-in-one process's CPU in the benchmark's profiles. 400 lets the heap
// grow to five times what is live before a cycle, trading memory (a few
// hundred MiB under full load instead of about half as much) for that CPU;
// docs/performance.md has the measurement. Set GOGC (and GOMEMLIMIT, for a
// container with a memory limit) to choose otherwise.
const DefaultGCPercent = 400

// TuneGC applies DefaultGCPercent unless the operator set GOGC. Servers call
// it once at start (Main, `ferry dev`); command-line tools do not need it.
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
}
