package worker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/worker"
)

// A worker announces the types it handles and the dispatch partitions it
// owns; a dispatch of a type it lacks is rejected (handed back with its
// dispatch id, for re-routing), never started nor failed, while the next
// dispatch of a type it has runs.
func TestForeignTypeIsRejectedNotFailed(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{}, func(r *worker.Registry) {
		r.Register("report.build", func(context.Context, *worker.Job) (any, error) { return "built", nil })
	})
	ws := b.waitFor("status with partitions", func(ev schema.Event) bool {
		ws, ok := ev.Data.(schema.WorkerStatus)
		return ok && ws.Routing != nil && len(ws.Routing.Partitions) == 4
	}).Data.(schema.WorkerStatus)
	if !slices.Equal(ws.Routing.Partitions, []int32{0, 1, 2, 3}) {
		t.Errorf("partitions = %v, want all four of the only member", ws.Routing.Partitions)
	}
	if !slices.Equal(ws.Routing.Types, []string{"fail", "http", "noop", "report.build", "sleep"}) {
		t.Errorf("types = %v", ws.Routing.Types)
	}

	foreign := b.dispatch("email.send", nil)
	rej := b.waitFor("rejection", func(ev schema.Event) bool {
		ws, ok := ev.Data.(schema.WorkerStatus)
		return ok && len(ws.Rejected) > 0
	}).Data.(schema.WorkerStatus)
	want := schema.DispatchRef{JobRef: foreign.JobRef, DispatchID: foreign.DispatchID}
	if !slices.Equal(rej.Rejected, []schema.DispatchRef{want}) || rej.Stopping || rej.Slots == 0 {
		t.Errorf("rejection = %+v, want %+v from a live worker", rej, want)
	}
	if c := b.completed(b.dispatch("report.build", nil)); c.WorkerID != "w-"+t.Name() {
		t.Errorf("completed = %+v", c)
	}
	// Kafka orders one worker's records per topic only; give a stray
	// lifecycle event of the rejected job time to show up.
	time.Sleep(500 * time.Millisecond)
	if evs := b.all(func(ev schema.Event) bool {
		l, ok := ev.Data.(schema.Lifecycle)
		return ok && l.Ref().JobID == foreign.JobID
	}); len(evs) > 0 {
		t.Errorf("the rejected job got lifecycle events: %+v", evs)
	}
}
