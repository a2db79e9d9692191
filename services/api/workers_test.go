package api_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/api"
)

// announce produces a worker announcement of the short pool, as a worker
// does every second.
func (b *bundle) announce(t *testing.T, id string, parts []int32, types ...string) {
	t.Helper()
	rec, err := schema.NewRecord(b.deps.Topics.Workers(), "ferry/worker", &schema.WorkerStatus{
		WorkerID: id, Pool: schema.PoolShort, Slots: 4, At: time.Now().UTC(),
		Routing: &schema.WorkerRouting{Types: types, Partitions: parts},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.deps.Kafka.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// A queued job says why it waits while no live worker takes its type, in
// GET /v1/jobs/{id} and in the list; with FERRY_API_UNKNOWN_TYPES=reject
// an unannounced type is refused with 422 unknown_job_type, item by item.
func TestWaitingReasonAndUnknownTypes(t *testing.T) {
	b := setup(t, api.Config{UnknownTypes: "reject"})
	b.announce(t, "builtin", []int32{0, 1}, "noop")
	accepted := 0 // jobs the api took, to count them in the projection
	submitted := func(typ string) resp {
		r := b.do(t, b.keyA, "POST", "/v1/jobs", map[string]any{"type": typ})
		if r.Status == 202 {
			accepted++
		}
		return r
	}
	// Until the api has caught up with the workers topic it takes every
	// type (workers.Table.Known), so wait for both answers: noop taken,
	// report.build refused.
	var r resp
	eventually(t, func() error {
		if r := submitted("noop"); r.Status != 202 {
			return fmt.Errorf("noop: %d %s (the api has not read the announcement yet?)", r.Status, r.Raw)
		}
		if r = submitted("report.build"); r.Status != 422 {
			return fmt.Errorf("unknown type: %d %s, want 422 (the api has not caught up with the workers topic yet?)", r.Status, r.Raw)
		}
		return nil
	})
	if r.ErrorCode() != api.CodeUnknownJobType {
		t.Fatalf("unknown type: %d %s, want 422 %s", r.Status, r.Raw, api.CodeUnknownJobType)
	}
	batch := b.do(t, b.keyA, "POST", "/v1/jobs/batch", map[string]any{"jobs": []map[string]any{{"type": "noop"}, {"type": "report.build"}}})
	if batch.Status != 202 {
		t.Fatalf("batch: %d %s", batch.Status, batch.Raw)
	}
	items := batch.Body["jobs"].([]any)
	if e, _ := items[1].(map[string]any)["error"].(map[string]any); len(items) != 2 || items[0].(map[string]any)["status"] != "queued" ||
		e["code"] != api.CodeUnknownJobType || e["status"] != 422.0 {
		t.Errorf("batch items: %s", batch.Raw)
	}

	// A worker announces report.build without a partition: known, so
	// accepted, but it waits and says so.
	b.announce(t, "reports", nil, "report.build")
	var id string
	eventually(t, func() error {
		r := submitted("report.build")
		if r.Status != 202 {
			return fmt.Errorf("report.build: %d %s", r.Status, r.Raw)
		}
		id = r.Body["id"].(string)
		return nil
	})
	waiting := func() string {
		r := b.do(t, b.keyA, "GET", "/v1/jobs/"+id, nil)
		w, _ := r.Body["waiting"].(string)
		return w
	}
	eventually(t, func() error {
		if w := waiting(); w == "" {
			return fmt.Errorf("job %s has no waiting reason", id)
		}
		return nil
	})
	b.projected(t, b.keyA, accepted+1) // and the batch's noop
	eventually(t, func() error {
		list := b.do(t, b.keyA, "GET", "/v1/jobs?type=report.build", nil)
		for _, j := range list.Body["jobs"].([]any) {
			if m := j.(map[string]any); m["id"] == id && m["waiting"] == nil {
				return fmt.Errorf("listed without waiting: %v", m)
			}
		}
		return nil
	})
	b.announce(t, "reports", []int32{2}, "report.build")
	eventually(t, func() error {
		if w := waiting(); w != "" {
			return fmt.Errorf("still waiting (%q) after a worker took report.build", w)
		}
		return nil
	})
	// The noop jobs do not wait while builtin is live.
	b.announce(t, "builtin", []int32{0, 1}, "noop")
	eventually(t, func() error {
		list := b.do(t, b.keyA, "GET", "/v1/jobs?type=noop", nil)
		for _, j := range list.Body["jobs"].([]any) {
			if w := j.(map[string]any)["waiting"]; w != nil {
				return fmt.Errorf("noop job waiting: %v", w)
			}
		}
		return nil
	})
}
