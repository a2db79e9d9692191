package api_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
)

// TestConcurrentSubmissionsReadableAtOnce: many concurrent submissions
// through a group commit with more than one produce in flight are each
// answered 202 with their own job, every one is on the enqueued topic
// exactly once, and each is readable by a GET right after its 202: the GET
// waits for the status projection (the read barrier), with no cache
// written beside the produce.
func TestConcurrentSubmissionsReadableAtOnce(t *testing.T) {
	c := testenv.Common(t, api.Needs)
	deps := testenv.Open(t, c, api.Needs)
	key := testenv.Tenant(t, deps.Postgres, "acme")
	svc, err := api.New(t.Context(), deps, api.Config{ProduceInflight: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Serve(t, deps, svc)
	testenv.Run(t, svc)
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

// TestReadWhileTheProjectionIsBehind: with the status projection stopped,
// a GET of a job submitted moments ago waits VisibleWait and answers 503
// not_visible_yet with Retry-After (never 404: the job exists), and so does
// its cancel; a GET of an id minted long ago, or of a well-formed recent id
// nobody submitted once the projection runs, answers 404 not_found. Once
// the projection runs again, the job is readable.
func TestReadWhileTheProjectionIsBehind(t *testing.T) {
	c := testenv.Common(t, api.Needs)
	deps := testenv.Open(t, c, api.Needs)
	key := testenv.Tenant(t, deps.Postgres, "acme")
	svc, err := api.New(t.Context(), deps, api.Config{VisibleWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Serve(t, deps, svc) // svc.Run (the projection) is not started yet
	b := &bundle{srv: srv, deps: deps, brokers: c.KafkaBrokers[0]}

	r := b.do(t, key, "POST", "/v1/jobs", map[string]any{"type": "noop"})
	if r.Status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", r.Status, r.Raw)
	}
	id := r.Body["id"].(string)
	start := time.Now()
	g := b.do(t, key, "GET", "/v1/jobs/"+id, nil)
	if g.Status != http.StatusServiceUnavailable || g.ErrorCode() != "not_visible_yet" || g.Header.Get("Retry-After") != "1" {
		t.Fatalf("GET while the projection is stopped: %d %v %s", g.Status, g.Header, g.Raw)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("answered after %v, before VisibleWait", waited)
	}
	if x := b.do(t, key, "POST", "/v1/jobs/"+id+"/cancel", nil); x.Status != http.StatusServiceUnavailable || x.ErrorCode() != "not_visible_yet" {
		t.Fatalf("cancel while the projection is stopped: %d %s", x.Status, x.Raw)
	}
	old := jobs.DerivedID("nobody", time.Now().Add(-time.Hour))
	if g := b.do(t, key, "GET", "/v1/jobs/"+old, nil); g.Status != http.StatusNotFound || g.ErrorCode() != "not_found" {
		t.Fatalf("GET of an id minted an hour ago: %d %s", g.Status, g.Raw)
	}

	testenv.Run(t, svc)
	if g := b.do(t, key, "GET", "/v1/jobs/"+id, nil); g.Status != http.StatusOK || g.Body["id"] != id {
		t.Fatalf("GET once the projection runs: %d %s", g.Status, g.Raw)
	}
	if g := b.do(t, key, "GET", "/v1/jobs/"+jobs.NewID(), nil); g.Status != http.StatusNotFound || g.ErrorCode() != "not_found" {
		t.Fatalf("GET of a recent id nobody submitted: %d %s", g.Status, g.Raw)
	}
}
