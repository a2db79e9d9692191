package api_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
)

// TestConcurrentSubmissionsReadableAtOnce: many concurrent submissions
// through a group commit with more than one produce in flight are each
// answered 202 with their own job, every one is on the enqueued topic
// exactly once, and each is readable right after its 202 from the
// just-submitted cache alone (the status projection does not run here).
// That the answer waits for the cache write is held deterministically by
// groupcommit's TestSlowSideWriteHoldsOnlyItsGroup.
func TestConcurrentSubmissionsReadableAtOnce(t *testing.T) {
	c := testenv.Common(t, api.Needs)
	deps := testenv.Open(t, c, api.Needs)
	key := testenv.Tenant(t, deps.Postgres, "acme")
	svc, err := api.New(t.Context(), deps, api.Config{ProduceInflight: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Serve(t, deps, "api", svc) // svc.Run (the projection) is not started
	b := &bundle{srv: srv, deps: deps, brokers: c.KafkaBrokers[0]}

	const n = 64
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := b.do(t, key, "POST", "/v1/jobs", map[string]any{"type": "noop", "payload": map[string]any{"i": i}})
			if r.Status != http.StatusAccepted {
				t.Errorf("submit %d: %d %s", i, r.Status, r.Raw)
				return
			}
			ids[i] = r.Body["id"].(string)
			g := b.do(t, key, "GET", "/v1/jobs/"+ids[i], nil)
			if g.Status != http.StatusOK || g.Body["id"] != ids[i] || g.Body["payload"].(map[string]any)["i"] != float64(i) {
				t.Errorf("GET right after the 202 of %s: %d %s", ids[i], g.Status, g.Raw)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want := map[string]bool{}
	for _, id := range ids {
		if want[id] {
			t.Fatalf("job id %s answered twice", id)
		}
		want[id] = true
	}
	seen := map[string]int{}
	b.records(t, "ferry.jobs.enqueued", n, func(r *kgo.Record) bool {
		if want[string(r.Key)] {
			seen[string(r.Key)]++
			return true
		}
		return false
	})
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("job %s on the enqueued topic %d times", id, seen[id])
		}
	}
	if got := fmt.Sprint(len(seen)); got != fmt.Sprint(n) {
		t.Errorf("%s of %d jobs on the enqueued topic", got, n)
	}
}
