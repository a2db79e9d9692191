package testenv

import (
	"testing"
	"time"
)

// Eventually polls check every 50 ms until it returns nil, and fails t
// with check's last error once within has passed. Deadlines in tests are
// generous bounds on a loaded machine, never a measure of speed.
func Eventually(t testing.TB, within time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
