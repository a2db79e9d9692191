package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/audit"
	"github.com/ferryhq/ferry/services/webhooks"
)

// projectionTopics are the topics of each Postgres projection of the stack,
// by its group.
func projectionTopics() map[string][]string {
	tp := schema.Topics{}
	return map[string][]string{
		"ferry-api-status":     tp.LifecycleTopics(),
		"ferry-dlq-entries":    {tp.Lifecycle(schema.EventDLQ), tp.Lifecycle(schema.EventEnqueued)},
		audit.ProjectionGroup:  append(tp.LifecycleTopics(), tp.Breakers(), tp.Changes()),
		webhooks.ConsumerGroup: tp.LifecycleTopics(),
	}
}

// TestProjectionsSharedReaderSwitch: the all-in-one process reads for its
// Postgres projections in one consumer group (ferry-projections); restarted
// with FERRY_DEV_SHARED_PROJECTIONS=false on the same Kafka and Postgres,
// each projection reads in its own group from the offsets the shared
// reader stored, and both phases' jobs are projected: statuses, dead
// letters, audit rows, and every projection's stored offsets reach the
// end of its topics.
func TestProjectionsSharedReaderSwitch(t *testing.T) {
	env := map[string]string{"FERRY_KAFKA_BROKERS": testenv.Kafka(t), "FERRY_POSTGRES_URL": testenv.Postgres(t), "FERRY_REDIS_URL": testenv.Redis(t)}
	shared := startStack(t, env)
	first := shared.projectedJobs("shared")
	if gs := shared.kafkaGroups(); !slices.Contains(gs, projection.SharedGroup) || slices.Contains(gs, "ferry-api-status") {
		t.Fatalf("shared reader: Kafka groups %v, want %s and no ferry-api-status", gs, projection.SharedGroup)
	}
	shared.waitOffsetsAtEnd()
	shared.stop()

	env["FERRY_DEV_SHARED_PROJECTIONS"] = "false"
	separate := startStack(t, env)
	second := separate.projectedJobs("separate")
	for _, id := range first {
		if st := separate.job(id)["status"]; st != "succeeded" && st != "dead" {
			t.Fatalf("job %s of the shared phase is %v", id, st)
		}
	}
	if gs := separate.kafkaGroups(); !slices.Contains(gs, "ferry-api-status") || !slices.Contains(gs, audit.ProjectionGroup) {
		t.Fatalf("separate readers: Kafka groups %v", gs)
	}
	separate.waitOffsetsAtEnd()
	for _, id := range append(first, second...) {
		separate.auditedOnce(id)
	}
}

// projectedJobs runs five noop jobs and one that dies, waits until the
// status and dlq projections show them, and returns their ids (the dead one
// last).
func (e *e2e) projectedJobs(phase string) []string {
	e.t.Helper()
	var ids []string
	for i := range 5 {
		ids = append(ids, e.submit(map[string]any{"type": "noop", "payload": map[string]any{"phase": phase, "i": i}}))
	}
	dead := e.submit(map[string]any{"type": "fail", "payload": map[string]any{"times": 5, "class": "app_error"}, "max_attempts": 1})
	for _, id := range ids {
		e.waitStatus(id, "succeeded", 60*time.Second)
	}
	e.waitStatus(dead, "dead", 60*time.Second)
	waitFor(e.t, 60*time.Second, "the DLQ entry of "+dead, func() bool {
		code, _ := e.call("GET", "/v1/dlq/"+dead, nil)
		return code == http.StatusOK
	})
	return append(ids, dead)
}

func (e *e2e) admin() *kadm.Client {
	e.t.Helper()
	cl, err := kafkax.NewClient(kafkax.Config{Brokers: []string{e.brokers}, ClientID: "e2e-admin"})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

func (e *e2e) kafkaGroups() []string {
	e.t.Helper()
	gs, err := e.admin().ListGroups(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return gs.Groups()
}

// waitOffsetsAtEnd waits until every projection's stored next offsets are
// the end offsets of its topics: nothing it reads is left behind.
func (e *e2e) waitOffsetsAtEnd() {
	e.t.Helper()
	adm := e.admin()
	groups := projectionTopics()
	testenv.Eventually(e.t, 60*time.Second, func() error {
		for _, g := range slices.Sorted(maps.Keys(groups)) {
			ends, err := adm.ListEndOffsets(context.Background(), groups[g]...)
			if err != nil {
				return err
			}
			stored, err := projection.StoredOffsets(context.Background(), e.stack.Deps.Postgres, g)
			if err != nil {
				return err
			}
			lacking := ""
			ends.Each(func(o kadm.ListedOffset) {
				if o.Offset > 0 && stored[o.Topic][o.Partition] != o.Offset && lacking == "" {
					lacking = fmt.Sprintf("%s: %s/%d stored %d, end %d", g, o.Topic, o.Partition, stored[o.Topic][o.Partition], o.Offset)
				}
			})
			if lacking != "" {
				return fmt.Errorf("%s", lacking)
			}
		}
		return nil
	})
}

// auditedOnce fails unless the audit log holds each lifecycle event of job
// id once: enqueued, started, and completed or failed, plus dlq for a dead
// job.
func (e *e2e) auditedOnce(id string) {
	e.t.Helper()
	rows, err := e.stack.Deps.Postgres.Query(context.Background(),
		`SELECT type, count(*) FROM audit_events WHERE job_id = $1 GROUP BY type`, id)
	if err != nil {
		e.t.Fatal(err)
	}
	per := map[string]int{}
	for rows.Next() {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			e.t.Fatal(err)
		}
		per[typ] = n
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	if len(per) < 3 {
		e.t.Fatalf("audit log of %s: %v, want enqueued, started and an end", id, per)
	}
	for typ, n := range per {
		if n != 1 {
			e.t.Fatalf("audit log of %s: %d rows of %s", id, n, typ)
		}
	}
}
