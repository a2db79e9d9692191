//go:build unix

package schema

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process used so far (user and system, all
// threads: GC included). Benchmarks report it per op because on a loaded
// machine wall-clock ns/op mostly measures the other load.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
