package config

import (
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	d, n := time.Duration(0), 7
	Default(&d, time.Second)
	Default(&n, 3)
	if d != time.Second || n != 7 {
		t.Fatalf("Default: d=%v (want 1s, was zero), n=%d (want 7, was set)", d, n)
	}
}
