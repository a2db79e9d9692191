// Package background lets the loops of a process that are off a job's path
// give their processor to the goroutines on it.
//
// The projections and the sse-bridge's log each handle the records of a
// fetch in one loop, which on a big batch runs for milliseconds without
// blocking. Go preempts a running goroutine only after 10 ms, so on two
// processors (a 2-core machine) two such loops leave nothing for a
// worker's runners, the scheduler's dispatch or the api's handlers, whose
// work is a job's latency. A runtime trace of 1,000 jobs due at one
// instant showed the runners waiting for a processor 9 ms at p90 and 19 at
// p99, behind single runs of 10–19 ms of the sse-bridge's and the
// projections' loops (docs/performance-history.md, Round 27).
//
// Only those loops call Step: a loop on a job's path (the scheduler's
// apply, a runner) that yielded would wait behind the background work it
// gave way to, which is the latency this package exists to keep low.
package background

import (
	"runtime"
	"runtime/metrics"
	"sync/atomic"
)

// every is how many steps pass between two looks at whether the stepping
// goroutine should yield: 32 records are ~100 µs of a loop's work, and a
// look ~0.1 µs.
const every = 32

// steps counts the process's steps; the loops share it, so together they
// look about every 32 records.
var steps atomic.Int64

// Step is called by a background loop once per record it handles. Every
// 32nd step yields the processor (runtime.Gosched) if a goroutine is
// waiting for one. It does not yield otherwise: a yield with nobody
// waiting wakes an idle processor to look for work, which at 1k/s cost
// ~25 µs of CPU per job when every 32nd codec call yielded (Round 27).
func Step() {
	if steps.Add(1)%every == 0 && othersRunnable() {
		runtime.Gosched()
	}
}

// runnableGoroutines is the runtime's count of the goroutines waiting for a
// processor (approximate: it reads the processors' queues unlocked).
const runnableGoroutines = "/sched/goroutines/runnable:goroutines"

// othersRunnable reports whether a goroutine is waiting for a processor.
func othersRunnable() bool {
	s := [1]metrics.Sample{{Name: runnableGoroutines}}
	metrics.Read(s[:])
	return s[0].Value.Kind() == metrics.KindUint64 && s[0].Value.Uint64() > 0
}
