package background

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// TestStepsLetAWaitingGoroutineRun: a loop that steps `every` times without
// blocking lets a goroutine waiting for the one processor run before the
// loop ends. Without the yield that goroutine would run only when the loop
// blocks, or after Go's 10 ms preemption.
func TestStepsLetAWaitingGoroutineRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	go ran.Store(true) // runnable, waiting for the processor this test holds
	for range every {
		Step()
	}
	if !ran.Load() {
		t.Fatalf("%d steps in a row kept a waiting goroutine from running", every)
	}
}
