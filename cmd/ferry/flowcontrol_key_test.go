package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// flowKeyRateLimit: a dispatch rate limit of 5 starts/s (burst 5) on one
// concurrency key of a tenant: no window of one second holds more than
// burst + rate starts of that key, while another key of the same tenant and
// type is not held up (TestFlowControl).
func flowKeyRateLimit(t *testing.T, e *e2e, rec *recorder) {
	k := e.fairTenant("keyrated", 1)
	code, out := e.as("admin-e2e").call("PATCH", "/v1/admin/tenants/keyrated", map[string]any{
		"flow_control": map[string]any{"key_rate_limits": map[string]any{"customer-9": map[string]any{"per_second": 5, "burst": 5}}}})
	if code != http.StatusOK {
		t.Fatalf("set key rate limit: %d %v", code, out)
	}
	waitFor(t, 30*time.Second, "the key rate limit in effect", func() bool {
		_, out := k.call("GET", "/v1/rate-limits", nil)
		rl, _ := out["rate_limits"].([]any)
		return len(rl) == 1 && rl[0].(map[string]any)["key"] == "customer-9" && rl[0].(map[string]any)["per_second"] == 5.0
	})
	const n = 30
	var jobs []map[string]any
	for range n {
		for _, key := range []string{"customer-9", "customer-8"} {
			jobs = append(jobs, map[string]any{"type": "noop", "concurrency": map[string]any{"key": key, "limit": 100}})
		}
	}
	if code, out := k.call("POST", "/v1/jobs/batch", map[string]any{"jobs": jobs}); code != http.StatusAccepted {
		t.Fatalf("batch: %d %v", code, out)
	}
	of := func(key string) []time.Time {
		return dispatchTimesOf(rec, func(d schema.Dispatch) bool {
			return d.TenantID == "keyrated" && d.Job.Concurrency != nil && d.Job.Concurrency.Key == key
		})
	}
	waitFor(t, 60*time.Second, "the other key's jobs dispatched", func() bool { return len(of("customer-8")) == n })
	if got := len(of("customer-9")); got >= n {
		t.Errorf("all %d jobs of the rate-limited key started before the other key's %d: the limit held nothing back", got, n)
	}
	waitFor(t, 60*time.Second, "the rate-limited key's jobs", func() bool { return len(of("customer-9")) == n })
	ts := of("customer-9")
	most, span := mostInWindow(ts, time.Second), ts[len(ts)-1].Sub(ts[0])
	t.Logf("%d starts of a key at 5/s burst 5: at most %d in any 1 s window, over %v", n, most, span.Round(time.Millisecond))
	if most > 10 {
		t.Errorf("%d starts of the key within one second, want at most burst + rate = 10", most)
	}
	if min := time.Duration(n-5) * time.Second / 5; span < min-100*time.Millisecond {
		t.Errorf("%d starts took %v, the bucket allows no less than %v", n, span, min)
	}
}
