package scheduler

import (
	"testing"
	"time"
)

// TestIdleTickBacksOff: while a pool's steps dispatch nothing the fallback
// tick doubles from Tick up to idleTickMax; one dispatch brings it back.
func TestIdleTickBacksOff(t *testing.T) {
	s := &Service{cfg: Config{Tick: 5 * time.Millisecond}}
	var got []time.Duration
	d := time.Duration(0)
	for range 8 {
		d = s.nextTick(d, 0)
		got = append(got, d)
	}
	want := []time.Duration{5, 10, 20, 40, 80, 100, 100, 100}
	for i, w := range want {
		if got[i] != w*time.Millisecond {
			t.Fatalf("empty step %d: tick %v, want %v (all: %v)", i+1, got[i], w*time.Millisecond, got)
		}
	}
	if d = s.nextTick(d, 3); d != 5*time.Millisecond {
		t.Fatalf("after a dispatch: tick %v, want Tick", d)
	}
	// A configured Tick above the cap is kept as it is.
	slow := &Service{cfg: Config{Tick: 250 * time.Millisecond}}
	if d = slow.nextTick(slow.nextTick(0, 0), 0); d != 250*time.Millisecond {
		t.Fatalf("tick above the cap: %v, want 250ms", d)
	}
}
