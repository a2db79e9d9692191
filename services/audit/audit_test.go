package audit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	audit "github.com/ferryhq/ferry/services/audit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("go.opencensus.io/stats/view.(*worker).start"),
	)
}

const adminKey = "fry_admin_test_key"

type bundle struct {
	t      *testing.T
	svc    *audit.Service
	deps   *service.Deps
	srv    *httptest.Server
	super  *pgxpool.Pool // superuser, for tampering and counting
	topics schema.Topics
	keyA   string // tenant acme
	keyB   string // tenant globex
	offset atomic.Int64
	stop   func()
}

// setup starts the audit service against a fresh database, connected as a
// non-superuser application role, and an embedded Kafka broker. The
// projection is not running until b.start.
func setup(t *testing.T, cfg audit.Config) *bundle {
	t.Helper()
	ctx := context.Background()
	common := testenv.Common(t, audit.Needs)
	super, err := pgxpool.New(ctx, common.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	common.PostgresURL = appRole(t, super, common.PostgresURL)
	common.AdminKey = adminKey

	b := &bundle{t: t, super: super, topics: schema.Topics{Prefix: "ferry."}, deps: testenv.Open(t, common, audit.Needs)}
	b.keyA, b.keyB = testenv.Tenant(t, b.deps.Postgres, "acme"), testenv.Tenant(t, b.deps.Postgres, "globex")
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(b.offset.Load())) }
	b.svc, err = audit.New(t.Context(), b.deps, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = testenv.Serve(t, b.deps, b.svc)
	return b
}

// appRole creates a login role that owns the test database (so the service
// runs its migrations as it) and returns the database URL for that role.
func appRole(t *testing.T, super *pgxpool.Pool, superURL string) string {
	t.Helper()
	ctx := context.Background()
	u, _ := url.Parse(superURL)
	db := strings.TrimPrefix(u.Path, "/")
	role := "app_" + strings.TrimPrefix(db, "t_")
	if len(role) > 60 {
		role = role[:60]
	}
	ident := pgx.Identifier{role}.Sanitize()
	for _, q := range []string{
		"CREATE ROLE " + ident + " LOGIN NOSUPERUSER",
		"ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " OWNER TO " + ident,
	} {
		if _, err := super.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		// Runs after the service's pool closed (cleanups run last first).
		for _, q := range []string{
			"ALTER DATABASE " + pgx.Identifier{db}.Sanitize() + " OWNER TO CURRENT_USER",
			"REASSIGN OWNED BY " + ident + " TO CURRENT_USER",
			"DROP OWNED BY " + ident,
			"DROP ROLE " + ident,
		} {
			if _, err := super.Exec(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
		super.Close()
	})
	u.User = url.User(role)
	return u.String()
}

// start runs the service (projection and maintenance) until b.stop or the
// end of the test.
func (b *bundle) start() {
	b.stop = testenv.Run(b.t, b.svc)
}

// rec builds a lifecycle record of data with a chosen ce_time.
func (b *bundle) rec(source string, data schema.Lifecycle, at time.Time, traceparent string) *kgo.Record {
	b.t.Helper()
	value, err := json.Marshal(data)
	if err != nil {
		b.t.Fatal(err)
	}
	r := schema.NewRecordAt(b.topics.Lifecycle(data.EventType()), source, data, value, schema.NewEventID(), at)
	if traceparent != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: schema.HeaderTraceParent, Value: []byte(traceparent)})
	}
	return r
}

func (b *bundle) produce(recs ...*kgo.Record) {
	b.t.Helper()
	// Copies: a produced record is owned by the client; duplicates must be
	// separate records with the same headers.
	cp := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		c := *r
		c.Headers = append([]kgo.RecordHeader(nil), r.Headers...)
		c.Partition = 0
		cp[i] = &c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kafkax.ProduceAll(ctx, b.deps.Kafka, cp...); err != nil {
		b.t.Fatal(err)
	}
}

// waitRows waits until audit_events holds n rows and stays so briefly. The
// deadline is generous: on a loaded 2-core machine (load average ~20) the
// projection of the large-row tests took longer than 20 s.
func (b *bundle) waitRows(n int) {
	b.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var got int
		if err := b.super.QueryRow(context.Background(), `SELECT count(*) FROM audit_events`).Scan(&got); err != nil {
			b.t.Fatal(err)
		}
		if got == n {
			return
		}
		if got > n {
			b.t.Fatalf("audit_events holds %d rows, want %d", got, n)
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("audit_events holds %d rows after 90s, want %d", got, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type resp = testenv.Response

func (b *bundle) get(key, path string, hdr ...string) resp {
	b.t.Helper()
	return testenv.Call(b.t, b.srv.URL, key, http.MethodGet, path, nil, hdr...)
}

type event struct {
	EventID    string          `json:"event_id"`
	TenantID   string          `json:"tenant_id"`
	JobID      string          `json:"job_id"`
	Type       string          `json:"type"`
	Attempt    int             `json:"attempt"`
	OccurredAt time.Time       `json:"occurred_at"`
	Actor      string          `json:"actor"`
	TraceID    string          `json:"trace_id"`
	Data       json.RawMessage `json:"data"`
	ChainID    string          `json:"chain_id"`
	Seq        int64           `json:"seq"`
	Hash       string          `json:"hash"`
}

// list pages through /v1/audit/events with query q, limit per page.
func (b *bundle) list(key, q string, limit int) []event {
	b.t.Helper()
	var out []event
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			b.t.Fatal("pagination does not end")
		}
		path := fmt.Sprintf("/v1/audit/events?limit=%d&%s", limit, q)
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		r := b.get(key, path)
		if r.Status != http.StatusOK {
			b.t.Fatalf("GET %s: %d %s", path, r.Status, r.Raw)
		}
		var page struct {
			Events     []event `json:"events"`
			NextCursor string  `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.Raw, &page); err != nil {
			b.t.Fatal(err)
		}
		if _, present := r.Body["next_cursor"]; !present || page.Events == nil {
			b.t.Fatalf("GET %s: events or next_cursor missing: %s", path, r.Raw)
		}
		if len(page.Events) > limit {
			b.t.Fatalf("page of %d events exceeds limit %d", len(page.Events), limit)
		}
		out = append(out, page.Events...)
		if page.NextCursor == "" {
			return out
		}
		cursor = page.NextCursor
	}
}

type verifyReport struct {
	OK            bool  `json:"ok"`
	ChainsChecked int   `json:"chains_checked"`
	RowsChecked   int64 `json:"rows_checked"`
	Cuts          int   `json:"cuts"`
	Broken        []struct {
		ChainID  string `json:"chain_id"`
		TenantID string `json:"tenant_id"`
		EventID  string `json:"event_id"`
		Seq      int64  `json:"seq"`
		Reason   string `json:"reason"`
	} `json:"broken"`
}

func (b *bundle) verify(key string, hdr ...string) verifyReport {
	b.t.Helper()
	r := b.get(key, "/v1/audit/verify", hdr...)
	if r.Status != http.StatusOK {
		b.t.Fatalf("verify: %d %s", r.Status, r.Raw)
	}
	var rep verifyReport
	if err := json.Unmarshal(r.Raw, &rep); err != nil {
		b.t.Fatal(err)
	}
	return rep
}

// jobEvents is the life of one job: attempt 1 fails, attempt 2 completes.
func (b *bundle) jobEvents(tenant, job string, t0 time.Time) []*kgo.Record {
	ref := func(a int) schema.JobRef { return schema.JobRef{JobID: job, TenantID: tenant, Attempt: a} }
	spec := schema.JobSpec{Type: "email", Queue: "default", Priority: 5, MaxAttempts: 3, Pool: "short", Payload: json.RawMessage(`{"to": "a@example.com", "n": 1.50}`)}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	return []*kgo.Record{
		b.rec("ferry/api", schema.Enqueued{JobRef: ref(1), Job: spec, CreatedAt: at(0), RunAt: at(0), Reason: schema.ReasonSubmitted, Actor: "key_" + tenant}, at(0), tp),
		b.rec("ferry/worker", schema.Started{JobRef: ref(1), WorkerID: "w1", DispatchID: "d1", StartedAt: at(1)}, at(1), tp),
		b.rec("ferry/worker", schema.Progress{JobRef: ref(1), WorkerID: "w1", DispatchID: "d1", Percent: 50, At: at(2)}, at(2), ""),
		b.rec("ferry/worker", schema.Failed{JobRef: ref(1), WorkerID: "w1", DispatchID: "d1", Error: schema.ErrorInfo{Class: schema.ClassAppError, Message: "boom \u0000 nul"}, StartedAt: at(1), FinishedAt: at(3)}, at(3), ""),
		b.rec("ferry/scheduler", schema.Enqueued{JobRef: ref(2), Job: spec, CreatedAt: at(0), RunAt: at(5), Reason: schema.ReasonRetry}, at(4), ""),
		b.rec("ferry/worker", schema.Started{JobRef: ref(2), WorkerID: "w2", DispatchID: "d2", StartedAt: at(5)}, at(5), ""),
		b.rec("ferry/worker", schema.Completed{JobRef: ref(2), WorkerID: "w2", DispatchID: "d2", Result: json.RawMessage(`{"ok":true}`), StartedAt: at(5), FinishedAt: at(6)}, at(6), ""),
	}
}

func idsOf(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i], _ = schema.Header(r, schema.HeaderID)
	}
	return out
}

func TestProjectionExactlyOnceOrderedAndIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t, audit.Config{})
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	jobA := b.jobEvents("acme", "job_a", t0)
	jobB := b.jobEvents("globex", "job_b", t0)

	// Part of the records, then stop the consumer.
	b.produce(jobA[:3]...)
	b.start()
	b.waitRows(3)
	b.stop()
	// The rest while it is stopped, with duplicates of events already
	// recorded and of events in this very batch; produced in reverse time
	// order across topics.
	rest := append([]*kgo.Record{}, jobA[3:]...)
	for i, j := 0, len(rest)-1; i < j; i, j = i+1, j-1 {
		rest[i], rest[j] = rest[j], rest[i]
	}
	b.produce(rest...)
	b.produce(jobA[0], jobA[1], jobA[5], jobA[6])
	b.produce(jobB...)
	b.start()
	b.waitRows(len(jobA) + len(jobB))
	// A stop in the middle of nothing and a restart change nothing.
	b.stop()
	b.produce(jobA[2])
	b.start()
	time.Sleep(500 * time.Millisecond)
	b.waitRows(len(jobA) + len(jobB))

	got := b.list(b.keyA, "job_id=job_a", 100)
	want := idsOf(jobA)
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, e := range got {
		if e.EventID != want[i] {
			t.Fatalf("event %d is %s, want %s (time order)", i, e.EventID, want[i])
		}
		if e.TenantID != "acme" || e.JobID != "job_a" {
			t.Fatalf("event %d: %+v", i, e)
		}
	}
	wantTypes := []string{"enqueued", "started", "progress", "failed", "enqueued", "started", "completed"}
	wantActors := []string{"key_acme", "ferry/worker", "ferry/worker", "ferry/worker", "ferry/scheduler", "ferry/worker", "ferry/worker"}
	for i, e := range got {
		if e.Type != wantTypes[i] || e.Actor != wantActors[i] {
			t.Errorf("event %d: type %q actor %q, want %q %q", i, e.Type, e.Actor, wantTypes[i], wantActors[i])
		}
		if !e.OccurredAt.Equal(t0.Add(time.Duration(i) * time.Second)) {
			t.Errorf("event %d occurred %v", i, e.OccurredAt)
		}
	}
	// Every event's data is the text it carried, byte for byte, the
	// failed event's \u0000 included.
	for i, e := range got {
		if !bytes.Equal(e.Data, jobA[i].Value) {
			t.Errorf("event %d data %s, want %s", i, e.Data, jobA[i].Value)
		}
	}
	var failed schema.Failed
	if err := json.Unmarshal(got[3].Data, &failed); err != nil || failed.Error.Message != "boom \u0000 nul" {
		t.Errorf("failed event data: %s (%v)", got[3].Data, err)
	}
	if got[0].TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || got[2].TraceID != "" {
		t.Errorf("trace ids: %q %q", got[0].TraceID, got[2].TraceID)
	}
	if got[6].Attempt != 2 || !strings.Contains(string(got[6].Data), `"result":{"ok":true}`) {
		t.Errorf("completed event: attempt %d data %s", got[6].Attempt, got[6].Data)
	}

	// Pagination: every page size gives the same sequence.
	for _, limit := range []int{1, 2, 3} {
		paged := b.list(b.keyA, "", limit)
		if len(paged) != len(want) {
			t.Fatalf("limit %d: %d events", limit, len(paged))
		}
		for i := range paged {
			if paged[i].EventID != want[i] {
				t.Fatalf("limit %d: event %d is %s, want %s", limit, i, paged[i].EventID, want[i])
			}
		}
	}
	// Filters.
	if evs := b.list(b.keyA, "type=started", 100); len(evs) != 2 || evs[0].Type != "started" {
		t.Errorf("type=started: %+v", evs)
	}
	if evs := b.list(b.keyA, "actor=key_acme", 100); len(evs) != 1 || evs[0].EventID != want[0] {
		t.Errorf("actor=key_acme: %+v", evs)
	}
	from := t0.Add(2 * time.Second).Format(time.RFC3339)
	to := t0.Add(4 * time.Second).Format(time.RFC3339)
	if evs := b.list(b.keyA, "from="+from+"&to="+to, 100); len(evs) != 2 || evs[0].EventID != want[2] || evs[1].EventID != want[3] {
		t.Errorf("from/to: %+v", evs)
	}
	for _, q := range []string{"type=bogus", "from=yesterday", "limit=0", "limit=5000", "cursor=%21%21"} {
		if r := b.get(b.keyA, "/v1/audit/events?"+q); r.Status != http.StatusBadRequest {
			t.Errorf("%s: status %d %s", q, r.Status, r.Raw)
		}
	}
	// Pagination parameters answer as on every list route.
	for q, code := range map[string]string{"limit=0": "invalid_parameter", "limit=5000": "invalid_parameter", "limit=x": "invalid_parameter",
		"cursor=%21%21": "invalid_cursor", "cursor=e30": "invalid_cursor"} {
		r := b.get(b.keyA, "/v1/audit/events?"+q)
		e, _ := r.Body["error"].(map[string]any)
		fields, _ := e["fields"].(map[string]any)
		if r.Status != http.StatusBadRequest || r.ErrorCode() != code || (code == "invalid_parameter" && fields["limit"] == nil) {
			t.Errorf("%s: %d %s", q, r.Status, r.Raw)
		}
	}

	// Tenant isolation: globex sees only its own job, nothing of acme.
	if evs := b.list(b.keyB, "job_id=job_a", 100); len(evs) != 0 {
		t.Fatalf("globex sees acme's events: %+v", evs)
	}
	for _, e := range b.list(b.keyB, "", 100) {
		if e.TenantID != "globex" {
			t.Fatalf("globex sees %+v", e)
		}
	}
	if r := b.get("fry_nope", "/v1/audit/events"); r.Status != http.StatusUnauthorized {
		t.Errorf("unknown key: %d", r.Status)
	}

	// Verify: each tenant its own chains, the admin all of them.
	repA := b.verify(b.keyA)
	if !repA.OK || repA.RowsChecked != int64(len(jobA)) {
		t.Errorf("verify acme: %+v", repA)
	}
	repAll := b.verify(adminKey)
	if !repAll.OK || repAll.RowsChecked != int64(len(jobA)+len(jobB)) || repAll.ChainsChecked <= repA.ChainsChecked {
		t.Errorf("verify all: %+v (acme %+v)", repAll, repA)
	}
	if rep := b.verify(adminKey, auth.TenantHeader, "globex"); !rep.OK || rep.RowsChecked != int64(len(jobB)) {
		t.Errorf("verify globex as admin: %+v", rep)
	}
}

// TestDataKeptAsReceived: an event's data is stored, listed, exported and
// hashed as the text it carried, including what jsonb would rewrite (key
// order, a repeated key, number spelling) or refuse (a \u0000, a lone
// surrogate, a number beyond numeric); and a batch that repeats events
// already recorded appends only its new events, in an unbroken chain.
func TestDataKeptAsReceived(t *testing.T) {
	t.Parallel()
	b := setup(t, audit.Config{ExportBatch: 2})
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	ref := schema.JobRef{JobID: "job_d", TenantID: "acme", Attempt: 1}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	odd := json.RawMessage(`{"z":1,"a":[1.50,1E+2,-0],"a":"again","nul":"x\u0000y","lone":"\ud800","big":1e1000000,"html":"\u003cb\u003e"}`)
	recs := []*kgo.Record{
		b.rec("ferry/worker", schema.Started{JobRef: ref, WorkerID: "w1", DispatchID: "d1", StartedAt: at(0)}, at(0), ""),
		b.rec("ferry/worker", schema.Progress{JobRef: ref, WorkerID: "w1", DispatchID: "d1", Percent: 10, At: at(1)}, at(1), ""),
		b.rec("ferry/worker", schema.Progress{JobRef: ref, WorkerID: "w1", DispatchID: "d1", Percent: 60, At: at(2)}, at(2), ""),
		b.rec("ferry/worker", schema.Completed{JobRef: ref, WorkerID: "w1", DispatchID: "d1", Result: odd, StartedAt: at(0), FinishedAt: at(3)}, at(3), ""),
	}
	if !bytes.Contains(recs[3].Value, odd) {
		t.Fatalf("the record does not carry the result as written: %s", recs[3].Value)
	}
	b.produce(recs[:2]...)
	b.start()
	b.waitRows(2)
	b.stop()
	// One batch: both recorded events again, between the new ones.
	b.produce(recs[2], recs[0], recs[3], recs[1])
	b.start()
	b.waitRows(len(recs))

	got := b.list(b.keyA, "job_id=job_d", 100)
	if len(got) != len(recs) {
		t.Fatalf("got %d events, want %d", len(got), len(recs))
	}
	for i, e := range got {
		if !bytes.Equal(e.Data, recs[i].Value) {
			t.Errorf("event %d data %s, want %s", i, e.Data, recs[i].Value)
		}
	}
	r := b.get(b.keyA, "/v1/audit/export?job_id=job_d")
	lines := bytes.Split(bytes.TrimSpace(r.Raw), []byte("\n"))
	if r.Status != http.StatusOK || len(lines) != len(recs) {
		t.Fatalf("export: %d, %d lines: %s", r.Status, len(lines), r.Raw)
	}
	for i, line := range lines {
		var e event
		if err := json.Unmarshal(line, &e); err != nil || !bytes.Equal(e.Data, recs[i].Value) {
			t.Errorf("export line %d: %s (%v)", i, line, err)
		}
	}
	if rep := b.verify(b.keyA); !rep.OK || rep.RowsChecked != int64(len(recs)) {
		t.Errorf("verify: %+v", rep)
	}
}

// TestOneUniqueIndexPerEvent: audit_events keeps three indexes, the one
// ordering a tenant's events unique; it refuses a second row of an event
// (same tenant, ce_time and ce_id) from any writer, and the projection,
// given the event again, skips it instead of failing on it.
func TestOneUniqueIndexPerEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, audit.Config{})
	ctx := context.Background()
	recs := b.jobEvents("acme", "job_u", time.Now().UTC().Add(-time.Hour).Truncate(time.Second))
	b.produce(recs...)
	b.start()
	b.waitRows(len(recs))

	rows, err := b.super.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'audit_events' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]string{}
	var name, def string
	if _, err := pgx.ForEachRow(rows, []any{&name, &def}, func() error { defs[name] = def; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(defs) != 3 || !strings.Contains(defs["audit_events_tenant_time"], "UNIQUE INDEX") ||
		!strings.Contains(defs["audit_events_tenant_time"], "(tenant_id, occurred_at, event_id)") ||
		!strings.Contains(defs["audit_events_job"], "USING hash (job_id)") || defs["audit_events_chain"] == "" {
		t.Fatalf("indexes of audit_events: %v", defs)
	}
	// The backstop: a copy of a recorded row, even with another seq, is refused.
	_, err = b.super.Exec(ctx, `INSERT INTO audit_events SELECT event_id, tenant_id, job_id, type, attempt, occurred_at,
		recorded_at, actor, trace_id, data, chain_id, seq + 1000, prev_hash, hash FROM audit_events LIMIT 1`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("second row of an event: %v, want a unique violation", err)
	}
	// Delivered again, the events are skipped (not parked as poison), and
	// the chains still verify. New events of the job on the same topics
	// and partitions, produced after the copies, are recorded after them.
	b.produce(recs[0], recs[3], recs[6])
	later := b.jobEvents("acme", "job_u", time.Now().UTC().Add(-time.Hour/2).Truncate(time.Second))
	b.produce(later[0], later[3], later[6])
	b.waitRows(len(recs) + 3)
	var parked int
	if err := b.super.QueryRow(ctx, `SELECT count(*) FROM ferry_quarantine`).Scan(&parked); err != nil || parked != 0 {
		t.Fatalf("parked records: %d (%v), want none", parked, err)
	}
	if rep := b.verify(b.keyA); !rep.OK || rep.RowsChecked != int64(len(recs)+3) {
		t.Fatalf("verify: %+v", rep)
	}
}

func TestAppendOnlyAndTamperDetection(t *testing.T) {
	t.Parallel()
	b := setup(t, audit.Config{})
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	recs := b.jobEvents("acme", "job_t", t0)
	// Several events on one chain: progress reports of one job.
	for i := range 4 {
		recs = append(recs, b.rec("ferry/worker", schema.Progress{JobRef: schema.JobRef{JobID: "job_t", TenantID: "acme", Attempt: 2},
			WorkerID: "w2", DispatchID: "d2", Percent: float64(10 * i), At: t0.Add(10 * time.Second)}, t0.Add(time.Duration(10+i)*time.Second), ""))
	}
	b.produce(recs...)
	b.start()
	b.waitRows(len(recs))
	ctx := context.Background()

	// The service's own role cannot change or remove rows.
	app := b.deps.Postgres
	for _, q := range []string{
		`UPDATE audit_events SET actor = 'mallory'`,
		`DELETE FROM audit_events`,
		`TRUNCATE audit_events`,
		`DELETE FROM audit_chain_cuts`,
		`UPDATE audit_chain_heads SET seq = 0`,
	} {
		if _, err := app.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "not allowed") && !strings.Contains(err.Error(), "only move forward") {
			t.Errorf("%s through the service pool: err = %v, want rejection", q, err)
		}
	}
	if rep := b.verify(b.keyA); !rep.OK {
		t.Fatalf("verify before tampering: %+v", rep)
	}

	// As superuser, with triggers off: alter one progress row, remove another.
	progress := b.list(b.keyA, "type=progress", 100)
	if len(progress) != 5 {
		t.Fatalf("progress events: %d", len(progress))
	}
	altered, removed := progress[1], progress[3]
	if altered.ChainID != removed.ChainID {
		t.Fatalf("progress rows on different chains: %s %s", altered.ChainID, removed.ChainID)
	}
	completed := b.list(b.keyA, "type=completed", 100)[0]
	tamper := func(q string, args ...any) {
		t.Helper()
		tx, err := b.super.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck
		if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tamper(`UPDATE audit_events SET data = jsonb_set(data::jsonb, '{percent}', '99')::json WHERE event_id = $1`, altered.EventID)
	rep := b.verify(b.keyA)
	if rep.OK || len(rep.Broken) != 1 || rep.Broken[0].EventID != altered.EventID || rep.Broken[0].Seq != altered.Seq ||
		rep.Broken[0].ChainID != altered.ChainID || rep.Broken[0].Reason != "hash_mismatch" {
		t.Fatalf("after altering %s (seq %d): %+v", altered.EventID, altered.Seq, rep)
	}

	// Removing the last row of another chain is a truncation.
	tamper(`DELETE FROM audit_events WHERE event_id = $1`, completed.EventID)
	rep = b.verify(b.keyA)
	if rep.OK || len(rep.Broken) != 2 {
		t.Fatalf("after removing %s: %+v", completed.EventID, rep)
	}
	var trunc bool
	for _, br := range rep.Broken {
		if br.ChainID == completed.ChainID && br.Reason == "truncated" && br.Seq == completed.Seq {
			trunc = true
		}
	}
	if !trunc {
		t.Errorf("want truncated at seq %d of %s: %+v", completed.Seq, completed.ChainID, rep)
	}

	// Put the altered row back as it was: it verifies again.
	tamper(`UPDATE audit_events SET data = $2::json WHERE event_id = $1`, altered.EventID, string(altered.Data))
	// Removing a middle row of the chain: the next row reports the gap.
	tamper(`DELETE FROM audit_events WHERE event_id = $1`, progress[2].EventID)
	rep = b.verify(b.keyA)
	var gap bool
	for _, br := range rep.Broken {
		if br.ChainID == removed.ChainID && br.EventID == removed.EventID && br.Reason == "seq_gap" {
			gap = true
		}
	}
	if !gap {
		t.Errorf("want seq_gap at %s (seq %d): %+v", removed.EventID, removed.Seq, rep)
	}
	// Another tenant's verification is unaffected.
	if rep := b.verify(b.keyB); !rep.OK {
		t.Errorf("globex: %+v", rep)
	}
}

func TestExport(t *testing.T) {
	t.Parallel()
	b := setup(t, audit.Config{ExportBatch: 2})
	t0 := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	recs := b.jobEvents("acme", "job_e", t0)
	other := b.jobEvents("acme", "job_f", t0.Add(time.Minute))
	b.produce(append(recs, append(other, b.jobEvents("globex", "job_g", t0)...)...)...)
	b.start()
	b.waitRows(3 * len(recs))
	want := idsOf(recs)

	r := b.get(b.keyA, "/v1/audit/export?format=ndjson&job_id=job_e")
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-ndjson") {
		t.Fatalf("ndjson: %d %v %s", r.Status, r.Header, r.Raw)
	}
	sc := bufio.NewScanner(bytes.NewReader(r.Raw))
	var lines []event
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("ndjson line %q: %v", sc.Text(), err)
		}
		lines = append(lines, e)
	}
	if len(lines) != len(want) {
		t.Fatalf("ndjson: %d lines, want %d", len(lines), len(want))
	}
	for i, e := range lines {
		if e.EventID != want[i] || e.TenantID != "acme" || e.Hash == "" {
			t.Errorf("ndjson line %d: %+v", i, e)
		}
	}
	// The whole tenant, across several keyset batches.
	r = b.get(b.keyA, "/v1/audit/export")
	if n := bytes.Count(r.Raw, []byte("\n")); n != 2*len(recs) {
		t.Errorf("full ndjson export: %d lines, want %d", n, 2*len(recs))
	}
	if bytes.Contains(r.Raw, []byte("globex")) {
		t.Error("acme's export contains globex rows")
	}

	r = b.get(b.keyA, "/v1/audit/export?format=csv&job_id=job_e")
	if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("csv: %d %v", r.Status, r.Header)
	}
	rows, err := csv.NewReader(bytes.NewReader(r.Raw)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(want)+1 || rows[0][0] != "event_id" || rows[0][len(rows[0])-1] != "data" {
		t.Fatalf("csv: %d rows, header %v", len(rows), rows[0])
	}
	for i, row := range rows[1:] {
		if row[0] != want[i] || row[1] != "acme" || row[2] != "job_e" {
			t.Errorf("csv row %d: %v", i, row)
		}
		if !json.Valid([]byte(row[len(row)-1])) {
			t.Errorf("csv row %d data is not JSON: %q", i, row[len(row)-1])
		}
	}
	if rows[1][3] != "enqueued" || rows[1][7] != "key_acme" {
		t.Errorf("csv first row: %v", rows[1])
	}
	if r := b.get(b.keyA, "/v1/audit/export?format=xml"); r.Status != http.StatusBadRequest {
		t.Errorf("format=xml: %d", r.Status)
	}
	if r := b.get(adminKey, "/v1/audit/export"); r.Status != http.StatusBadRequest {
		t.Errorf("admin without tenant: %d", r.Status)
	}
}

func TestRetentionDropsPartitionsAsCleanCut(t *testing.T) {
	t.Parallel()
	b := setup(t, audit.Config{Retention: 8760 * time.Hour})
	now := time.Now().UTC()
	old := now.AddDate(0, -11, 0)
	ref := func(a int) schema.JobRef { return schema.JobRef{JobID: "job_r", TenantID: "acme", Attempt: a} }
	spec := schema.JobSpec{Type: "t", Queue: "default", Priority: 5, MaxAttempts: 5, Pool: "short"}
	enq := func(a int, at time.Time) *kgo.Record {
		return b.rec("ferry/api", schema.Enqueued{JobRef: ref(a), Job: spec, CreatedAt: at, RunAt: at, Reason: schema.ReasonSubmitted}, at, "")
	}
	// One chain (same job, same topic): old, new, then a late old event
	// whose seq is after the new one.
	b.produce(enq(1, old))
	b.produce(enq(2, now))
	b.produce(enq(3, old.Add(time.Minute)))
	b.start()
	b.waitRows(3)
	if rep := b.verify(b.keyA); !rep.OK || rep.RowsChecked != 3 {
		t.Fatalf("before retention: %+v", rep)
	}

	// Two months later the old month is past retention.
	b.offset.Store(int64(61 * 24 * time.Hour))
	b.svc.Maintain(context.Background())
	b.waitRows(1)
	var cuts int
	if err := b.super.QueryRow(context.Background(), `SELECT count(*) FROM audit_chain_cuts`).Scan(&cuts); err != nil {
		t.Fatal(err)
	}
	if cuts != 1 {
		t.Fatalf("cuts: %d", cuts)
	}
	rep := b.verify(b.keyA)
	if !rep.OK || rep.Cuts != 1 || rep.RowsChecked != 1 {
		t.Fatalf("after retention: %+v", rep)
	}
	// The chain goes on from the cut.
	b.produce(enq(4, now.Add(time.Second)))
	b.waitRows(2)
	if rep := b.verify(b.keyA); !rep.OK || rep.RowsChecked != 2 {
		t.Fatalf("after a new row: %+v", rep)
	}
	// Partitions ahead exist for the shifted clock too.
	var parts int
	if err := b.super.QueryRow(context.Background(), `SELECT count(*) FROM pg_inherits WHERE inhparent = 'audit_events'::regclass`).Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts < 5 {
		t.Errorf("partitions: %d", parts)
	}
}
