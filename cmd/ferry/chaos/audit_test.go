package chaos_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/services/audit"
)

// auditEvent is one produced lifecycle event, as the audit query must
// return it.
type auditEvent struct {
	id    string
	job   string
	typ   schema.EventType
	at    time.Time
	topic string
	part  int32
	off   int64
}

// TestAuditKilledMidBatch: a backlog of lifecycle events (with 1 % of the
// records produced twice) is projected by ferry-audit, which is SIGKILLed
// while a batch transaction is open and restarted. The rows after the kill
// are exactly the events below the stored offsets (whole batches, nothing
// of the open one); in the end every event has exactly one row, each job's
// events come back from GET /v1/audit/events once each in time order, and
// GET /v1/audit/verify finds every chain intact.
func TestAuditKilledMidBatch(t *testing.T) {
	start := time.Now()
	c := newCluster(t, nil)
	ctx := context.Background()
	const tenant = "acme"

	// The backlog, produced before the service exists.
	events, dups := produceAuditBacklog(t, c, tenant, 4000)
	want := map[string]*auditEvent{}
	byJob := map[string][]*auditEvent{}
	for _, e := range events {
		want[e.id] = e
		byJob[e.job] = append(byJob[e.job], e)
	}
	total := len(want)
	if total != len(events) {
		t.Fatalf("%d events but %d distinct ids", len(events), total)
	}
	t.Logf("produced %d events of %d jobs, plus %d duplicate records, in %v", total, len(byJob), len(dups), time.Since(start).Round(time.Millisecond))

	// One connection, so the service's backends are every other one.
	pcfg, err := pgxpool.ParseConfig(c.env["FERRY_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 1
	db, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	count := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM audit_events`).Scan(&n); err != nil {
			if strings.Contains(err.Error(), "does not exist") {
				return 0 // not migrated yet
			}
			t.Fatal(err)
		}
		return n
	}
	writing := func() bool {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	// First run: kill it mid-projection, once a quarter of the rows are in
	// (several batches committed) and while a batch transaction is open.
	// Polled fast so a quicker projection cannot slip past the window.
	projStart := time.Now()
	first, _ := startAudit(c, "audit-1", false)
	lo, target, hi := total/10, total/4, total*9/10
	var atKill int
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		select {
		case <-first.done:
			t.Fatalf("audit-1 exited: %v\n%s", first.exitErr, tail(first.logPath, 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out with %d of %d rows projected", count(), total)
		}
		n := count()
		if n > hi {
			t.Fatalf("%d of %d rows projected before a kill could land between %d and %d", n, total, lo, hi)
		}
		if n >= target && writing() {
			c.signal(first, syscall.SIGKILL)
			atKill = n
			break
		}
	}
	c.wait(first, 10*time.Second)
	killedAfter := time.Since(projStart)
	// Postgres rolls the open transaction back once it notices the client
	// is gone; wait for that before counting.
	waitFor(t, 10*time.Second, "the killed service's sessions to end", func() bool {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})

	// What survived is exactly the events of the records below the stored
	// offsets: whole committed batches, nothing of the one in flight.
	offsets := storedAuditOffsets(t, db)
	committed := map[string]bool{}
	for _, e := range append(append([]*auditEvent(nil), events...), dups...) {
		if e.off < offsets[e.topic][e.part] {
			committed[e.id] = true
		}
	}
	rows := auditEventIDs(t, db)
	afterKill := len(rows)
	if afterKill != len(committed) {
		t.Errorf("after the kill: %d rows, but the stored offsets cover %d events (a partial batch?)", afterKill, len(committed))
	}
	for id, n := range rows {
		if n != 1 {
			t.Errorf("after the kill: event %s has %d rows", id, n)
		}
		if !committed[id] {
			t.Errorf("after the kill: event %s has a row but its record is not below the stored offset", id)
		}
	}
	for id := range committed {
		if rows[id] == 0 {
			t.Errorf("after the kill: event %s is below the stored offset but has no row", id)
		}
	}
	if afterKill < lo || afterKill > hi {
		t.Fatalf("after the kill: %d of %d rows, want between %d and %d", afterKill, total, lo, hi)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("killed after %v with %d rows visible and a batch open; %d rows committed (%.0f %%), matching the stored offsets",
		killedAfter.Round(time.Millisecond), atKill, afterKill, 100*float64(afterKill)/float64(total))

	// The tenant and its key, now that the service migrated the database.
	key, _ := auth.NewKey()
	if err := auth.EnsureTenant(ctx, db, tenant, "Acme", key); err != nil {
		t.Fatal(err)
	}

	// Second run: everything arrives, once.
	restart := time.Now()
	_, base := startAudit(c, "audit-2", true)
	ends := endOffsets(t, c.brokers)
	waitFor(t, 60*time.Second, "every record projected", func() bool {
		got := storedAuditOffsets(t, db)
		for topic, parts := range ends {
			for p, end := range parts {
				if got[topic][p] < end {
					return false
				}
			}
		}
		return true
	})
	t.Logf("restarted; the remaining %d events projected in %v", total-afterKill, time.Since(restart).Round(time.Millisecond))
	rows = auditEventIDs(t, db)
	if len(rows) != total {
		t.Errorf("%d rows for %d distinct events", len(rows), total)
	}
	lost, doubled := 0, 0
	for id := range want {
		switch n := rows[id]; {
		case n == 0:
			lost++
			if lost <= 5 {
				t.Errorf("event %s (%s of %s) has no row", id, want[id].typ, want[id].job)
			}
		case n > 1:
			doubled++
			if doubled <= 5 {
				t.Errorf("event %s has %d rows", id, n)
			}
		}
	}
	for id := range rows {
		if want[id] == nil {
			t.Errorf("row for unknown event %s", id)
		}
	}
	if lost+doubled > 0 {
		t.Fatalf("%d events lost, %d doubled", lost, doubled)
	}

	// The query: each sampled job's events, once each, in time order,
	// paging with small limits for some jobs.
	jobs := make([]string, 0, len(byJob))
	for j := range byJob {
		jobs = append(jobs, j)
	}
	slices.Sort(jobs)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	sample := jobs[:200]
	for i, job := range sample {
		limit := 100
		if i%2 == 0 {
			limit = 2 // several pages
		}
		got := auditList(t, base, key, job, limit)
		exp := slices.Clone(byJob[job])
		slices.SortFunc(exp, func(a, b *auditEvent) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return strings.Compare(a.id, b.id)
		})
		if len(got) != len(exp) {
			t.Errorf("job %s: %d events returned, want %d", job, len(got), len(exp))
			continue
		}
		for k := range exp {
			g, e := got[k], exp[k]
			if g.EventID != e.id || g.Type != string(e.typ) || !g.OccurredAt.Equal(e.at) || g.JobID != job || g.TenantID != tenant {
				t.Errorf("job %s: event %d is %s %s at %v, want %s %s at %v", job, k, g.EventID, g.Type, g.OccurredAt, e.id, e.typ, e.at)
				break
			}
		}
	}

	// Verify: every chain intact, every row checked.
	var chains int
	if err := db.QueryRow(ctx, `SELECT count(DISTINCT chain_id) FROM audit_events`).Scan(&chains); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key, c.env["FERRY_ADMIN_KEY"]} {
		rep := auditVerify(t, base, k)
		if !rep.OK || len(rep.Broken) != 0 || rep.RowsChecked != int64(total) || rep.ChainsChecked != chains {
			t.Errorf("verify: ok=%v chains %d (want %d) rows %d (want %d) broken %v",
				rep.OK, rep.ChainsChecked, chains, rep.RowsChecked, total, rep.Broken)
		}
	}
	t.Logf("%d jobs queried, %d chains verified; total %v", len(sample), chains, time.Since(start).Round(time.Millisecond))
}

// produceAuditBacklog produces the lifecycle events of n finished jobs of
// tenant straight into the lifecycle topics, in random order with explicit
// times, then re-produces 1 % of the records (same ce_id, same bytes). It
// returns the events and the duplicate records, with their offsets.
func produceAuditBacklog(t *testing.T, c *cluster, tenant string, n int) (events, dups []*auditEvent) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := kafkax.EnsureTopics(ctx, cl, kafkax.TopicSpec{Names: c.topics.All(), Partitions: 4}); err != nil {
		t.Fatal(err)
	}

	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	var recs []*kgo.Record
	var evs []*auditEvent
	add := func(job string, at time.Time, source string, d schema.Lifecycle) {
		value, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		topic := c.topics.Lifecycle(d.EventType())
		id := schema.NewEventID()
		recs = append(recs, schema.NewRecordAt(topic, source, d, value, id, at))
		evs = append(evs, &auditEvent{id: id, job: job, typ: d.EventType(), at: at.Truncate(time.Microsecond), topic: topic})
	}
	spec := schema.JobSpec{Type: "sleep", Queue: "default", MaxAttempts: 3, Pool: schema.PoolShort}
	for j := range n {
		job := fmt.Sprintf("job_audit_%05d", j)
		spec.Payload = json.RawMessage(fmt.Sprintf(`{"i":%d}`, j))
		t0 := base.Add(time.Duration(j) * 10 * time.Millisecond)
		step := 0
		at := func() time.Time { step++; return t0.Add(time.Duration(step) * time.Millisecond) }
		ref := func(attempt int) schema.JobRef { return schema.JobRef{JobID: job, TenantID: tenant, Attempt: attempt} }
		enq := func(attempt int, reason string) {
			tm := at()
			add(job, tm, "ferry/api", schema.Enqueued{JobRef: ref(attempt), Job: spec, CreatedAt: t0, RunAt: tm, Reason: reason, Actor: "key_chaos"})
		}
		run := func(attempt int) time.Time {
			tm := at()
			add(job, tm, "ferry/worker", schema.Started{JobRef: ref(attempt), WorkerID: "w1", DispatchID: fmt.Sprintf("d%d", attempt), StartedAt: tm})
			return tm
		}
		fail := func(attempt int, started time.Time) {
			tm := at()
			add(job, tm, "ferry/worker", schema.Failed{JobRef: ref(attempt), WorkerID: "w1", DispatchID: fmt.Sprintf("d%d", attempt),
				Error: schema.ErrorInfo{Class: schema.ClassAppError, Message: "boom"}, StartedAt: started, FinishedAt: tm})
		}
		complete := func(attempt int, started time.Time) {
			for p := range 2 {
				tm := at()
				add(job, tm, "ferry/worker", schema.Progress{JobRef: ref(attempt), WorkerID: "w1", DispatchID: fmt.Sprintf("d%d", attempt), Percent: float64(50 * p), At: tm})
			}
			tm := at()
			add(job, tm, "ferry/worker", schema.Completed{JobRef: ref(attempt), WorkerID: "w1", DispatchID: fmt.Sprintf("d%d", attempt),
				Result: json.RawMessage(`{"ok":true}`), StartedAt: started, FinishedAt: tm})
		}
		enq(1, schema.ReasonSubmitted)
		switch j % 10 {
		case 0: // retried once, then succeeded
			fail(1, run(1))
			enq(2, schema.ReasonRetry)
			complete(2, run(2))
		case 1: // dead-lettered
			fail(1, run(1))
			tm := at()
			add(job, tm, "ferry/scheduler", schema.DeadLettered{JobRef: ref(1), Job: spec, CreatedAt: t0,
				Error: schema.ErrorInfo{Class: schema.ClassPermanent, Message: "boom"}, History: []schema.Attempt{{Attempt: 1, Class: schema.ClassPermanent, Error: "boom"}}, DeadAt: tm})
		case 2: // cancelled
			tm := at()
			add(job, tm, "ferry/api", schema.Cancelled{JobRef: ref(1), Reason: "user", Actor: "key_chaos", At: tm})
		default: // succeeded
			complete(1, run(1))
		}
	}

	// Random production order: the query's order must come from the
	// events' times, not from arrival.
	perm := rand.New(rand.NewPCG(3, 4)).Perm(len(recs))
	shuffled := make([]*kgo.Record, len(recs))
	shuffledEvs := make([]*auditEvent, len(recs))
	for i, p := range perm {
		shuffled[i], shuffledEvs[i] = recs[p], evs[p]
	}
	var again []*kgo.Record
	for i := 0; i < len(shuffled); i += 100 {
		r := shuffled[i]
		again = append(again, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp})
		dups = append(dups, &auditEvent{id: shuffledEvs[i].id, job: shuffledEvs[i].job, typ: shuffledEvs[i].typ, at: shuffledEvs[i].at, topic: r.Topic})
	}
	if err := cl.ProduceSync(ctx, shuffled...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, again...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for i, r := range shuffled {
		shuffledEvs[i].part, shuffledEvs[i].off = r.Partition, r.Offset
	}
	for i, r := range again {
		dups[i].part, dups[i].off = r.Partition, r.Offset
	}
	return shuffledEvs, dups
}

// startAudit runs ferry-audit as a child named name with the cluster's
// settings and returns it and its base URL; with ready it waits until the
// service answers /readyz.
func startAudit(c *cluster, name string, ready bool) (*proc, string) {
	c.t.Helper()
	p, base := c.spawn("audit", name, nil)
	if ready {
		c.waitReady(p, base)
	}
	return p, base
}

// storedAuditOffsets reads the audit projection's stored next offsets.
func storedAuditOffsets(t *testing.T, db *pgxpool.Pool) map[string]map[int32]int64 {
	t.Helper()
	out, err := projection.StoredOffsets(context.Background(), db, audit.ProjectionGroup)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// auditEventIDs counts the rows of each event id.
func auditEventIDs(t *testing.T, db *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT event_id, count(*) FROM audit_events GROUP BY event_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// endOffsets is the high watermark of every lifecycle partition.
func endOffsets(t *testing.T, brokers string) map[string]map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), schema.Topics{}.LifecycleTopics()...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out
}

type auditRow struct {
	EventID    string    `json:"event_id"`
	TenantID   string    `json:"tenant_id"`
	JobID      string    `json:"job_id"`
	Type       string    `json:"type"`
	OccurredAt time.Time `json:"occurred_at"`
}

// auditList pages through GET /v1/audit/events?job_id=job.
func auditList(t *testing.T, base, key, job string, limit int) []auditRow {
	t.Helper()
	var out []auditRow
	cursor := ""
	for range 1000 {
		q := url.Values{"job_id": {job}, "limit": {fmt.Sprint(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Events     []auditRow `json:"events"`
			NextCursor *string    `json:"next_cursor"`
		}
		auditGet(t, base+"/v1/audit/events?"+q.Encode(), key, &page)
		if len(page.Events) > limit || page.NextCursor == nil {
			t.Fatalf("job %s: page of %d events (limit %d), next_cursor %v", job, len(page.Events), limit, page.NextCursor)
		}
		out = append(out, page.Events...)
		if cursor = *page.NextCursor; cursor == "" {
			return out
		}
	}
	t.Fatalf("job %s: too many pages", job)
	return nil
}

type auditReport struct {
	OK            bool              `json:"ok"`
	ChainsChecked int               `json:"chains_checked"`
	RowsChecked   int64             `json:"rows_checked"`
	Broken        []json.RawMessage `json:"broken"`
}

func auditVerify(t *testing.T, base, key string) auditReport {
	t.Helper()
	var rep auditReport
	auditGet(t, base+"/v1/audit/verify", key, &rep)
	return rep
}

func auditGet(t *testing.T, u, key string, out any) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, raw)
	}
}
