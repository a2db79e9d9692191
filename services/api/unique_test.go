package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
)

// uniqueJob is a submission with a unique key.
func uniqueJob(key, while string) map[string]any {
	return map[string]any{"type": "email.welcome", "payload": map[string]any{"user": 7},
		"unique": map[string]any{"key": key, "while": while, "ttl": "1h"}}
}

// wantDedup checks r answers 200 deduplicated with job id.
func wantDedup(t *testing.T, what string, r resp, id string) {
	t.Helper()
	if r.Status != http.StatusOK || r.Body["deduplicated"] != true || r.Body["id"] != id {
		t.Fatalf("%s: %d %s (want 200 deduplicated to %s)", what, r.Status, r.Raw, id)
	}
}

// produce sends lifecycle events as the other services would.
func (b *bundle) produce(t *testing.T, evs ...schema.Lifecycle) {
	t.Helper()
	var recs []*kgo.Record
	for _, e := range evs {
		rec, err := schema.NewRecord(b.deps.Topics.Lifecycle(e.EventType()), "test", e)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	if err := b.deps.Kafka.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitProjected polls the job list (which only the projection answers)
// until it holds job id with status st.
func (b *bundle) waitProjected(t *testing.T, key, id, st string) {
	t.Helper()
	eventually(t, func() error {
		r := b.do(t, key, "GET", "/v1/jobs?limit=500&status="+st, nil)
		for _, j := range r.Body["jobs"].([]any) {
			if j.(map[string]any)["id"] == id {
				return nil
			}
		}
		return fmt.Errorf("job %s not projected as %s: %s", id, st, r.Raw)
	})
}

// waitStatus polls the job until its status is st.
func (b *bundle) waitStatus(t *testing.T, key, id, st string) {
	t.Helper()
	eventually(t, func() error {
		if r := b.do(t, key, "GET", "/v1/jobs/"+id, nil); r.Body["status"] != st {
			return fmt.Errorf("job %s: %d %s, want status %s", id, r.Status, r.Raw, st)
		}
		return nil
	})
}

// TestUniqueJobs: a second submission with a held unique key answers the
// first job (200, deduplicated), in single and batch submissions and within
// one batch; the key is per tenant; the job carries its key; bad fields are
// 422.
func TestUniqueJobs(t *testing.T) {
	b := setup(t, api.Config{})
	first := b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("welcome-7", "queued"))
	if first.Status != http.StatusAccepted || first.Body["deduplicated"] != false {
		t.Fatalf("first: %d %s", first.Status, first.Raw)
	}
	id := first.Body["id"].(string)
	u, _ := first.Body["unique"].(map[string]any)
	if u["key"] != "welcome-7" || u["while"] != "queued" || u["until"] == nil {
		t.Fatalf("the job's unique key: %s", first.Raw)
	}
	wantDedup(t, "second, not projected yet", b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("welcome-7", "queued")), id)
	b.waitProjected(t, b.keyA, id, "queued")
	// Another body with the same key is still the same unique job.
	other := uniqueJob("welcome-7", "until_done")
	other["payload"] = map[string]any{"user": 7, "again": true}
	wantDedup(t, "other body, projected", b.do(t, b.keyA, "POST", "/v1/jobs", other), id)
	if g := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil); g.Body["unique"].(map[string]any)["key"] != "welcome-7" {
		t.Fatalf("projected resource: %s", g.Raw)
	}
	// A request with an Idempotency-Key answered by its unique key: a retry
	// of it gets the same answer (not 409 in flight).
	for _, what := range []string{"keyed, answered by the unique key", "its retry"} {
		wantDedup(t, what, b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("welcome-7", "queued"), "Idempotency-Key", "idem-u"), id)
	}
	// Another tenant has its own keys.
	if r := b.do(t, b.keyB, "POST", "/v1/jobs", uniqueJob("welcome-7", "queued")); r.Status != http.StatusAccepted || r.Body["id"] == id {
		t.Fatalf("other tenant: %d %s", r.Status, r.Raw)
	}
	// A batch: a held key, a new key twice (the second answers the first),
	// and no key.
	r := b.do(t, b.keyA, "POST", "/v1/jobs/batch", map[string]any{"jobs": []any{
		uniqueJob("welcome-7", "queued"), uniqueJob("welcome-8", "active"), uniqueJob("welcome-8", "active"), map[string]any{"type": "x"},
	}})
	jobs := r.Body["jobs"].([]any)
	item := func(k int) map[string]any { return jobs[k].(map[string]any) }
	if r.Status != http.StatusAccepted || item(0)["id"] != id || item(0)["deduplicated"] != true ||
		item(1)["deduplicated"] != false || item(2)["id"] != item(1)["id"] || item(2)["deduplicated"] != true ||
		item(3)["deduplicated"] != false {
		t.Fatalf("batch: %d %s", r.Status, r.Raw)
	}
	// A batch of only held keys answers 200.
	r = b.do(t, b.keyA, "POST", "/v1/jobs/batch", map[string]any{"jobs": []any{uniqueJob("welcome-8", "active")}})
	if r.Status != http.StatusOK || r.Body["jobs"].([]any)[0].(map[string]any)["id"] != item(1)["id"] {
		t.Fatalf("batch of a held key: %d %s", r.Status, r.Raw)
	}
	for field, bad := range map[string]map[string]any{
		"unique.key":   {"key": ""},
		"unique.while": {"key": "k", "while": "running"},
		"unique.ttl":   {"key": "k", "ttl": "forever"},
	} {
		r := b.do(t, b.keyA, "POST", "/v1/jobs", map[string]any{"type": "x", "unique": bad})
		if r.Status != http.StatusUnprocessableEntity || r.ErrorCode() != "validation_failed" || fieldsOf(r)[field] == nil {
			t.Errorf("%s: %d %s", field, r.Status, r.Raw)
		}
	}
}

// TestUniqueKeyReleasedByState: the key stops matching as soon as the
// projection sees its job leave the state: "queued" once it starts,
// "active" while it waits for a retry, "until_done" once it finished.
func TestUniqueKeyReleasedByState(t *testing.T) {
	b := setup(t, api.Config{})
	ids := map[string]string{}
	for _, while := range []string{"queued", "active", "until_done"} {
		r := b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("k-"+while, while))
		ids[while] = r.Body["id"].(string)
	}
	ref := func(while string, attempt int) schema.JobRef {
		return schema.JobRef{JobID: ids[while], TenantID: "acme", Attempt: attempt}
	}
	var started []schema.Lifecycle
	for _, while := range []string{"queued", "active", "until_done"} {
		started = append(started, schema.Started{JobRef: ref(while, 1), WorkerID: "w"})
	}
	b.produce(t, started...)
	for _, id := range ids {
		b.waitStatus(t, b.keyA, id, "running")
	}
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("k-queued", "queued")); r.Status != http.StatusAccepted || r.Body["id"] == ids["queued"] {
		t.Fatalf("queued key of a running job: %d %s", r.Status, r.Raw)
	}
	wantDedup(t, "active key of a running job", b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("k-active", "active")), ids["active"])
	wantDedup(t, "until_done key of a running job", b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("k-until_done", "until_done")), ids["until_done"])

	// Both fail and wait for a retry.
	var retry []schema.Lifecycle
	for _, while := range []string{"active", "until_done"} {
		retry = append(retry, schema.Failed{JobRef: ref(while, 1), WorkerID: "w", Error: schema.ErrorInfo{Class: schema.ClassRetryable, Message: "x"}})
	}
	b.produce(t, retry...)
	b.waitStatus(t, b.keyA, ids["active"], "scheduled")
	b.waitStatus(t, b.keyA, ids["until_done"], "scheduled")
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("k-active", "active")); r.Status != http.StatusAccepted || r.Body["id"] == ids["active"] {
		t.Fatalf("active key of a job waiting for its retry: %d %s", r.Status, r.Raw)
	}
	wantDedup(t, "until_done key of a job waiting for its retry", b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("k-until_done", "until_done")), ids["until_done"])
	b.produce(t, schema.Cancelled{JobRef: ref("until_done", 1), Reason: "user"})
	b.waitStatus(t, b.keyA, ids["until_done"], "cancelled")
	if r := b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("k-until_done", "until_done")); r.Status != http.StatusAccepted || r.Body["id"] == ids["until_done"] {
		t.Fatalf("until_done key of a cancelled job: %d %s", r.Status, r.Raw)
	}
}

// TestUniqueAfterRedisLoss: with Redis flushed while the job holding a key
// is queued, a second submission still answers that job (from the status
// projection), and the claim is back in Redis.
func TestUniqueAfterRedisLoss(t *testing.T) {
	b := setup(t, api.Config{})
	id := b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("report-1", "until_done")).Body["id"].(string)
	b.waitProjected(t, b.keyA, id, "queued")
	if err := b.rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	wantDedup(t, "after the flush", b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("report-1", "until_done")), id)
	if v := b.rdb.Get(context.Background(), "ferry:unique:acme:report-1").Val(); v != "j:"+id {
		t.Fatalf("claim after the repair: %q, want j:%s", v, id)
	}
	wantDedup(t, "again", b.do(t, b.keyA, "POST", "/v1/jobs", uniqueJob("report-1", "until_done")), id)
}

// TestUniqueAcrossReplicas: concurrent submissions of one key through two
// api instances sharing Redis, Postgres and Kafka create exactly one job;
// every other answer is that job, deduplicated.
func TestUniqueAcrossReplicas(t *testing.T) {
	b := setup(t, api.Config{})
	second, err := api.New(t.Context(), b.deps, api.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := testenv.Serve(t, b.deps, second)
	const n = 24
	var mu sync.Mutex
	created, ids := 0, map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		base := b.srv.URL
		if i%2 == 1 {
			base = srv2.URL
		}
		wg.Go(func() {
			r := testenv.Call(t, base, b.keyA, "POST", "/v1/jobs", uniqueJob("race", "queued"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Status == http.StatusAccepted:
				created++
			case r.Status != http.StatusOK || r.Body["deduplicated"] != true:
				t.Errorf("submission %d: %d %s", i, r.Status, r.Raw)
				return
			}
			ids[r.Body["id"].(string)]++
		})
	}
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Fatalf("%d jobs created, answers name %v; want exactly one job", created, ids)
	}
}
