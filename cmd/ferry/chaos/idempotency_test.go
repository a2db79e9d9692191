package chaos_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
)

// TestAPIKilledMidIdempotentSubmit is issue 11 item 5: the api SIGKILLed
// while it holds Idempotency-Keys, once between the claim and the produce
// and once between the produce and the key's completion. A client retrying
// each key with the same body gets its job within seconds (the in-flight
// claim is a short lease, not a 24h marker), and every key ends with
// exactly one job, which runs once, even when the dead api's produce did
// reach Kafka.
func TestAPIKilledMidIdempotentSubmit(t *testing.T) {
	c := newCluster(t, map[string]string{"FERRY_API_IDEMPOTENCY_CLAIM_TTL": "2s"})
	c.startAPI()
	healthy := c.apiBase
	c.start("scheduler", "scheduler", nil)
	c.start("worker", "worker", map[string]string{"FERRY_WORKER_CONCURRENCY": "8"})

	var ids []string
	for _, point := range []string{"claimed", "produced"} {
		keys := make([]string, 6)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", point, i)
		}
		victim := c.start("api", "api-paused-"+point, map[string]string{"FERRY_API_TEST_PAUSE_AT": point})
		// Killed only once settled in the status projection's group: a
		// member killed with its JoinGroup in flight can stay in a kfake
		// group for minutes, holding partitions (TestAPIKilledStatusTakeover).
		waitFor(t, 60*time.Second, "the victim settled in "+apiGroup, func() bool { return c.groupMembers(apiGroup) == 2 })
		held := c.hold(c.apiBase, keys)
		waitFor(t, 30*time.Second, "every request held at "+point, func() bool {
			return logCount(victim, "holding the request for a test") == len(keys)
		})
		c.signal(victim, syscall.SIGKILL)
		c.wait(victim, 10*time.Second)
		held.Wait()
		killedAt := time.Now()
		// The dead api is not replaced: the healthy one takes over its
		// partitions of the status projection (TestAPIKilledStatusTakeover).

		c.apiBase = healthy
		for _, k := range keys {
			id := c.retryKey(k, 20*time.Second)
			ids = append(ids, id)
			c.oneJobPerKey(k, id, point)
		}
		t.Logf("%s: every key answered with its job %v after the kill", point, time.Since(killedAt).Round(100*time.Millisecond))
		// The survivor takes over the dead api's status partitions once the
		// group notices it; the next victim then joins a settled group.
		waitFor(t, 150*time.Second, "the dead api gone from "+apiGroup, func() bool { return c.groupMembers(apiGroup) == 1 })
	}
	c.diagnose(ids, 60*time.Second)
	c.account(ids, "succeeded", 30*time.Second)
	for _, id := range ids {
		if n := len(eventsOf[schema.Started](c.rec, id)); n != 1 {
			t.Errorf("job %s started %d times, want once", id, n)
		}
	}
}

// keyedJob is the body every attempt with key sends.
func keyedJob(key string) map[string]any {
	return map[string]any{"type": "sleep", "payload": map[string]any{"ms": 50, "key": key}}
}

// hold sends one keyed submission per key to the api at base, each in its
// own goroutine; they hang until the api dies. Wait returns once all ended.
func (c *cluster) hold(base string, keys []string) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, k := range keys {
		body, _ := json.Marshal(keyedJob(k))
		wg.Go(func() {
			req, _ := http.NewRequest("POST", base+"/v1/jobs", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+c.key)
			req.Header.Set("Idempotency-Key", k)
			if resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req); err == nil {
				resp.Body.Close()
				c.t.Errorf("held request %s answered %s; the api should have died first", k, resp.Status)
			}
		})
	}
	return &wg
}

// retryKey resubmits key's job like a client would, answering 409 in flight
// with a retry after a second, until the api answers with the job (202 or
// 200 deduplicated) or d passes. It returns the job id.
func (c *cluster) retryKey(key string, d time.Duration) string {
	c.t.Helper()
	var id string
	waitFor(c.t, d, "a job for key "+key, func() bool {
		r := testenv.Call(c.t, c.apiBase, c.key, "POST", "/v1/jobs", keyedJob(key), "Idempotency-Key", key)
		switch {
		case r.Status == http.StatusAccepted || r.Status == http.StatusOK:
			id, _ = r.Body["id"].(string)
			return true
		case r.Status == http.StatusConflict && r.ErrorCode() == "idempotency_request_in_flight":
			time.Sleep(time.Second)
			return false
		}
		c.t.Fatalf("retry of %s: %d %s", key, r.Status, r.Raw)
		return false
	})
	return id
}

// oneJobPerKey asserts that every enqueued event carrying key is job id:
// a produce of the dead api and the retry's are the same job.
func (c *cluster) oneJobPerKey(key, id, point string) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, "the enqueued event of "+id, func() bool {
		return len(eventsOf[schema.Enqueued](c.rec, id)) > 0
	})
	jobs := map[string]int{}
	for _, ev := range c.rec.Events() {
		if e, ok := ev.Data.(schema.Enqueued); ok && e.IdempotencyKey == key {
			jobs[e.JobID]++
		}
	}
	if len(jobs) != 1 || jobs[id] == 0 {
		c.t.Errorf("%s: key %s has enqueued jobs %v, want only %s", point, key, jobs, id)
	}
	if again := c.retryKey(key, 5*time.Second); again != id {
		c.t.Errorf("%s: key %s answers job %s now, %s before", point, key, again, id)
	}
}

// diagnose logs, for jobs not terminal within d, their status row and the
// event types recorded for them.
func (c *cluster) diagnose(ids []string, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		n := 0
		for _, id := range ids {
			if s, _ := c.job(id)["status"].(string); schema.Status(s).Terminal() {
				n++
			}
		}
		if n == len(ids) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, id := range ids {
		var types []string
		for _, ev := range c.rec.Events() {
			if l, ok := ev.Data.(schema.Lifecycle); ok && l.Ref().JobID == id {
				types = append(types, string(ev.Type))
			}
		}
		c.t.Logf("job %s: %v; events %v", id, c.job(id)["status"], types)
	}
}
