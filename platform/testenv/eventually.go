package testenv

import (
	"fmt"
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

// WaitFor polls cond every 50 ms until it holds, and fails t, naming what
// it waited for, once within has passed: [Eventually] for a condition that
// has no error of its own to report.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, within, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("timed out waiting for %s", what)
	})
}
