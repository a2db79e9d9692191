package service

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	t.Setenv("GOGC", "") // restored after the test
	os.Unsetenv("GOGC")
	debug.SetGCPercent(100)
	TuneGC()
	if got := debug.SetGCPercent(100); got != DefaultGCPercent {
		t.Fatalf("GOGC unset: GC percent %d, want %d", got, DefaultGCPercent)
	}

	t.Setenv("GOGC", "150") // the operator's choice, which the runtime read at start
	debug.SetGCPercent(150)
	TuneGC()
	if got := debug.SetGCPercent(100); got != 150 {
		t.Fatalf("GOGC=150: GC percent %d, want it left at 150", got)
	}
}
