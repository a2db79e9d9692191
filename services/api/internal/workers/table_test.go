package workers

import (
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

var t0 = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)

func status(id string, at time.Time, parts []int32, types ...string) schema.WorkerStatus {
	return schema.WorkerStatus{WorkerID: id, Pool: schema.PoolShort, Slots: 4, At: at,
		Routing: &schema.WorkerRouting{Types: types, Partitions: parts}}
}

func TestWaitingFollowsTheSchedulersRule(t *testing.T) {
	tb := New(5*time.Second, 10*time.Minute)
	tb.Observe(status("builtin", t0, []int32{0, 1}, "noop"))
	if w := tb.Waiting(schema.PoolShort, "report.build", t0); w != "" {
		t.Errorf("before catching up: %q, want no verdict", w)
	}
	tb.CaughtUp()
	for _, tc := range []struct {
		what, pool, typ string
		at              time.Time
		want            string
	}{
		{"handled", schema.PoolShort, "noop", t0, ""},
		{"unhandled", schema.PoolShort, "report.build", t0, "no worker handles type report.build"},
		{"other pool", schema.PoolLong, "noop", t0, "no live worker in pool long"},
		{"worker silent", schema.PoolShort, "noop", t0.Add(6 * time.Second), "no live worker in pool short"},
	} {
		if got := tb.Waiting(tc.pool, tc.typ, tc.at); got != tc.want {
			t.Errorf("%s: Waiting = %q, want %q", tc.what, got, tc.want)
		}
	}
	// A handler without a partition: still waiting, said so.
	tb.Observe(status("reports", t0.Add(time.Second), nil, "report.build"))
	if got := tb.Waiting(schema.PoolShort, "report.build", t0.Add(time.Second)); got == "" || got == "no worker handles type report.build" {
		t.Errorf("handler without partition: %q", got)
	}
	// It takes partition 1 over: report.build runs, and noop still on 0.
	tb.Observe(status("reports", t0.Add(2*time.Second), []int32{1}, "report.build"))
	if got := tb.Waiting(schema.PoolShort, "report.build", t0.Add(2*time.Second)); got != "" {
		t.Errorf("after the rebalance: %q", got)
	}
	// An older announcement of a worker changes nothing.
	tb.Observe(status("reports", t0, nil, "report.build"))
	if got := tb.Waiting(schema.PoolShort, "report.build", t0.Add(2*time.Second)); got != "" {
		t.Errorf("an out-of-order announcement won: %q", got)
	}
	// A legacy worker takes everything.
	tb.Observe(schema.WorkerStatus{WorkerID: "legacy", Pool: schema.PoolLong, Slots: 1, At: t0})
	if got := tb.Waiting(schema.PoolLong, "anything", t0); got != "" {
		t.Errorf("legacy worker: %q", got)
	}
}

func TestKnownWithinTheWindow(t *testing.T) {
	tb := New(5*time.Second, 10*time.Minute)
	tb.Observe(status("reports", t0, []int32{0}, "report.build"))
	if !tb.Known(schema.PoolShort, "never.seen", t0) {
		t.Error("before catching up every type must be known (fail open)")
	}
	tb.CaughtUp()
	if !tb.Known(schema.PoolShort, "report.build", t0.Add(9*time.Minute)) {
		t.Error("a type announced 9m ago must be known (10m window), even with its worker gone")
	}
	if tb.Known(schema.PoolShort, "report.build", t0.Add(11*time.Minute)) {
		t.Error("a type last announced 11m ago must be unknown")
	}
	if tb.Known(schema.PoolShort, "never.seen", t0) || tb.Known(schema.PoolLong, "report.build", t0) {
		t.Error("unannounced type, or another pool's, must be unknown")
	}
	tb.Forget(t0.Add(11 * time.Minute))
	if len(tb.workers) != 0 || len(tb.seen) != 0 {
		t.Errorf("Forget kept %d workers and %d types", len(tb.workers), len(tb.seen))
	}
}
