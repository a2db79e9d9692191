package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

// poisonEnqueued produces, straight to Kafka (past the api's validation at
// the door), an enqueued event of tenant whose tag holds a NUL: Postgres
// rejects it in text and jsonb columns (22021, 22P05), so the projections
// that store tags or events (status, sse-bridge, audit) cannot apply it.
func (e *e2e) poisonEnqueued(tenant string) *kgo.Record {
	e.t.Helper()
	id := "job_" + schema.NewEventID()
	rec, err := schema.NewRecord(schema.Topics{Prefix: "ferry."}.Lifecycle(schema.EventEnqueued), "ferry/api", schema.Enqueued{
		JobRef: schema.JobRef{JobID: id, TenantID: tenant, Attempt: 1},
		Job: schema.JobSpec{Type: "noop", Queue: "default", Priority: 5, MaxAttempts: 1, Pool: schema.PoolShort,
			Tags: []string{"a\x00b"}},
		CreatedAt: time.Now().UTC(), RunAt: time.Now().UTC(), Reason: schema.ReasonSubmitted,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	return rec
}

// parkedFor waits until some consumer group parked rec and returns its
// list item (the first group found).
func (e *e2e) parkedFor(rec *kgo.Record) map[string]any {
	e.t.Helper()
	admin := e.as("admin-e2e")
	var found map[string]any
	waitFor(e.t, 30*time.Second, fmt.Sprintf("%s/%d@%d quarantined", rec.Topic, rec.Partition, rec.Offset), func() bool {
		code, out := admin.call("GET", "/v1/admin/quarantine?status=parked&limit=200", nil)
		if code != http.StatusOK {
			e.t.Fatalf("list quarantine: %d %v", code, out)
		}
		recs, _ := out["records"].([]any)
		for _, r := range recs {
			m := r.(map[string]any)
			if m["topic"] == rec.Topic && m["partition"] == float64(rec.Partition) && m["offset"] == float64(rec.Offset) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// TestHostileQuarantinePoisonRecord: a record the projections cannot store
// is parked, not retried forever; an operator sees it through the admin
// API (listed, inspected with its bytes shown safely), retries it (it
// fails again and is parked again with one more try) and discards it (kept,
// listed as discarded, with who and why); the gauge counts it; and another
// tenant's job, submitted afterwards, runs and is projected and streamed.
func TestHostileQuarantinePoisonRecord(t *testing.T) {
	e := startStack(t, nil)
	admin := e.as("admin-e2e")
	e.adminTenant("poisoner")
	rec := e.poisonEnqueued("poisoner")
	item := e.parkedFor(rec)
	id, group := item["id"].(string), item["consumer_group"].(string)
	if tries, _ := item["tries"].(float64); tries < 3 || item["error"] == "" || item["value_bytes"] != float64(len(rec.Value)) {
		t.Fatalf("parked item %v", item)
	}

	// Only the admin key; tenants get 403.
	code, out := e.call("GET", "/v1/admin/quarantine", nil)
	wantError(t, "tenant lists the quarantine", code, out, http.StatusForbidden, "forbidden")

	// Inspect: the value is the JSON event (text: the NUL is escaped in
	// JSON), the key the job id, the headers the CloudEvents attributes.
	code, out = admin.call("GET", "/v1/admin/quarantine/"+id, nil)
	val, _ := out["value"].(map[string]any)
	key, _ := out["key"].(map[string]any)
	if code != http.StatusOK || val["encoding"] != "text" || val["data"] != string(rec.Value) ||
		!strings.Contains(val["data"].(string), `a\u0000b`) || key["data"] != string(rec.Key) {
		t.Fatalf("inspect: %d %v", code, out)
	}
	if hs, _ := out["headers"].([]any); len(hs) != len(rec.Headers) {
		t.Fatalf("headers %v, want %d", out["headers"], len(rec.Headers))
	}
	code, out = admin.call("GET", "/v1/admin/quarantine/123456789", nil)
	wantError(t, "inspect unknown", code, out, http.StatusNotFound, "quarantine_record_not_found")

	// The gauge counts it for its group.
	series := fmt.Sprintf(`ferry_quarantined_records{group=%q`, group)
	waitFor(t, 10*time.Second, "the quarantine gauge", func() bool {
		for _, line := range strings.Split(scrapeText(t, e.base+"/metrics"), "\n") {
			if strings.HasPrefix(line, series) && strings.Contains(line, `status="parked"`) && !strings.HasSuffix(line, " 0") {
				return true
			}
		}
		return false
	})

	// Retry: the owning group re-applies it, it fails again, parked again.
	code, out = admin.call("POST", "/v1/admin/quarantine/"+id+"/retry", nil)
	if code != http.StatusAccepted || out["status"] != "retry" {
		t.Fatalf("retry: %d %v", code, out)
	}
	waitFor(t, 20*time.Second, "the retried record parked again", func() bool {
		_, out := admin.call("GET", "/v1/admin/quarantine/"+id, nil)
		return out["status"] == "parked" && out["tries"].(float64) == item["tries"].(float64)+1
	})

	// Discard every copy (each group that parked it): kept and listed.
	_, out = admin.call("GET", "/v1/admin/quarantine?status=parked&limit=200", nil)
	for _, r := range out["records"].([]any) {
		m := r.(map[string]any)
		if m["offset"] != float64(rec.Offset) || m["topic"] != rec.Topic || m["partition"] != float64(rec.Partition) {
			continue
		}
		code, d := admin.call("POST", "/v1/admin/quarantine/"+m["id"].(string)+"/discard", map[string]any{"reason": "hostile test"})
		if code != http.StatusOK || d["status"] != "discarded" || d["discarded_by"] != "admin" || d["discard_reason"] != "hostile test" {
			t.Fatalf("discard: %d %v", code, d)
		}
	}
	code, out = admin.call("GET", "/v1/admin/quarantine?status=discarded&group="+url.QueryEscape(group), nil)
	if recs, _ := out["records"].([]any); code != http.StatusOK || len(recs) != 1 || recs[0].(map[string]any)["id"] != id {
		t.Fatalf("discarded list: %d %v", code, out)
	}
	e.othersUnaffected(t)
}
