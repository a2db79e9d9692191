package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// TestPipelineLeaseAhead: with a look-ahead longer than their delay, two
// delayed jobs are dispatched at once, ahead of their run_at, carrying it
// as not_before. The one cancelled while the worker holds it never runs;
// the other starts at its run_at, not before.
func TestPipelineLeaseAhead(t *testing.T) {
	e := startStack(t, map[string]string{"FERRY_SCHEDULER_LOOKAHEAD": "15s"})
	topics := schema.Topics{}
	dispatches := e.record(topics.Dispatch(schema.PoolShort))
	started := e.record(topics.Lifecycle(schema.EventStarted))
	// A first job runs, so the workers have joined and announced their slots.
	e.waitStatus(e.submit(map[string]any{"type": "noop"}), "succeeded", 20*time.Second)

	held := e.submit(map[string]any{"type": "noop", "delay": "8s"})
	kept := e.submit(map[string]any{"type": "noop", "delay": "8s"})
	var runAt time.Time // the later of the two
	for _, id := range []string{held, kept} {
		runAt = parseTime(t, e.job(id)["scheduled_for"])
		ev := dispatches.WaitFor(t, 20*time.Second, "dispatch of "+id, func(ev schema.Event) bool { return ev.Subject == id })
		d := ev.Data.(schema.Dispatch)
		if d.NotBefore == nil || d.NotBefore.Before(runAt) {
			t.Fatalf("dispatch of %s: not_before %v, want its run_at %v", id, d.NotBefore, runAt)
		}
	}
	if time.Now().After(runAt) {
		t.Fatalf("dispatched after the run_at %v: nothing was leased ahead to cancel", runAt)
	}
	if code, out := e.call("POST", "/v1/jobs/"+held+"/cancel", nil); code != http.StatusAccepted {
		t.Fatalf("cancel %s: %d %v", held, code, out)
	}
	e.waitStatus(held, "cancelled", 10*time.Second)
	done := e.waitStatus(kept, "succeeded", 20*time.Second)
	if s := parseTime(t, done["started_at"]); s.Before(runAt) {
		t.Fatalf("started %v, before its run_at %v", s, runAt)
	}
	time.Sleep(time.Until(runAt.Add(time.Second))) // past the held job's run_at
	if n := started.Count(func(ev schema.Event) bool { return ev.Subject == held }); n != 0 {
		t.Fatalf("the job cancelled during its look-ahead started %d times", n)
	}
	if got := e.job(held)["status"]; got != "cancelled" {
		t.Fatalf("cancelled job is now %v", got)
	}
}
