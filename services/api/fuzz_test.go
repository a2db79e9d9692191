package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
)

// storeProbe is where FuzzSubmit checks that a produced record is storable:
// every text field of the job in a text column, its payload and the whole
// event in jsonb columns, as the status, dlq, audit and sse-bridge
// projections keep them.
const storeProbe = `CREATE TABLE IF NOT EXISTS fuzz_store (
	job_id text, type text, queue text, pool text, tags text[], idempotency_key text,
	payload jsonb, event jsonb)`

// fuzzEnv is the api under fuzzing: one per fuzzing process.
type fuzzEnv struct {
	url  string
	key  string
	pool *pgxpool.Pool
	cl   *kgo.Client // reads ferry.jobs.enqueued from the start
	seen map[string]*kgo.Record
}

func newFuzzEnv(t testing.TB) *fuzzEnv {
	c := testenv.Common(t, api.Needs)
	c.AdminKey = adminKey
	deps := testenv.Open(t, c, api.Needs)
	svc, err := api.New(t.Context(), deps, api.Config{MaxPayloadBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.Serve(t, deps, svc)
	testenv.Run(t, svc)
	if _, err := deps.Postgres.Exec(context.Background(), storeProbe); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaBrokers...), kgo.ConsumeTopics(deps.Topics.Lifecycle(schema.EventEnqueued)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &fuzzEnv{url: srv.URL, key: testenv.Tenant(t, deps.Postgres, "fuzz"), pool: deps.Postgres, cl: cl, seen: map[string]*kgo.Record{}}
}

// FuzzSubmit posts arbitrary bodies (and Idempotency-Keys) to POST /v1/jobs
// and /v1/jobs/batch. Whatever the API accepts must be storable: the
// enqueued record of every accepted job decodes with schema.Decode, and its
// text fields, payload and whole event insert into real Postgres text and
// jsonb columns. Nothing may answer 5xx.
func FuzzSubmit(f *testing.F) {
	seeds := []struct {
		body  string
		key   string
		batch bool
	}{
		{`{"type":"noop"}`, "", false},
		{`{"type":"noop","tags":["a\u0000b"]}`, "", false},
		{"{\"type\":\"noop\",\"tags\":[\"a\xffb\"]}", "", false},
		{`{"type":"noop","payload":{"s":"x\u0000y"}}`, "", false},
		{`{"type":"noop","payload":{"k\u0000":1}}`, "", false},
		{`{"type":"noop","payload":["\ud800","\udc00x"]}`, "", false},
		{`{"type":"noop","payload":"\ud83d\ude00"}`, "", false},
		{"{\"type\":\"noop\",\"payload\":\"\xed\xa0\x80\xff\"}", "", false},
		{`{"type":"noop","payload":[1e400,-1e-400,123456789012345678901234567890,1e131071]}`, "", false},
		{`{"type":"noop","payload":"` + strings.Repeat("<>&", 600) + `"}`, "", false},
		{`{"type":"noop","payload":"` + strings.Repeat("<", 680) + `"}`, "", false},
		{`{"type":"noop","payload":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, "", false},
		{`{"type":"noop","payload":` + strings.Repeat("[", 20000) + `}`, "", false},
		{`{"type":"noop","queue":"q\u0000","pool":"short\u0000"}`, "", false},
		{`{"type":"no\u0000op"}`, "", false},
		{`{"type":"noop","idempotency_key":"k\u0000"}`, "", false},
		{`{"type":"noop"}`, "key\xff", false},
		{`{"type":"noop","delay":"1000h"}`, "", false},
		{`{"type":"noop","run_at":"9999-12-31T23:59:59Z"}`, "", false},
		{`{"type":"noop","payload":{"a":1,"a":"\u0000"}}`, "", false},
		{`{"jobs":[{"type":"noop"},{"type":"noop","tags":["\u0000"]},{"type":"noop","payload":"\u0000"}]}`, "", true},
		{`{"jobs":[{"type":"noop","payload":"` + strings.Repeat("&", 700) + `"},{"type":"noop","idempotency_key":"\u0000"}]}`, "b", true},
		{"{\"jobs\":[{\"type\":\"noop\",\"payload\":\"\xff\"}]}", "k\xfe", true},
		{`{"jobs":[` + strings.Repeat(`{"type":"noop"},`, 20) + `{"type":"noop"}]}`, "", true},
		{`not json`, "", false},
		{`{"type":"noop"} {}`, "", true},
	}
	for _, s := range seeds {
		f.Add(s.body, s.key, s.batch)
	}
	env := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, body, key string, batch bool) {
		path := "/v1/jobs"
		if batch {
			path = "/v1/jobs/batch"
		}
		var hdr []string
		if key != "" && !strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			hdr = []string{"Idempotency-Key", key}
		}
		r := testenv.Call(t, env.url, env.key, http.MethodPost, path, body, hdr...)
		if r.Status >= 500 {
			t.Fatalf("%s %q: %d %s", path, body, r.Status, r.Raw)
		}
		for _, id := range acceptedIDs(r, batch) {
			env.checkStorable(t, id)
		}
	})
}

// acceptedIDs returns the ids of the jobs an answer accepted (new or
// deduplicated).
func acceptedIDs(r testenv.Response, batch bool) []string {
	if r.Status != http.StatusAccepted && r.Status != http.StatusOK {
		return nil
	}
	if !batch {
		id, _ := r.Body["id"].(string)
		return []string{id}
	}
	var ids []string
	items, _ := r.Body["jobs"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		if id, ok := m["id"].(string); ok && m["error"] == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// checkStorable finds the enqueued record of job id and stores it.
func (e *fuzzEnv) checkStorable(t *testing.T, id string) {
	t.Helper()
	rec := e.await(t, id)
	ev, err := schema.Decode(rec)
	if err != nil {
		t.Fatalf("job %s: the enqueued record does not decode: %v\n%s", id, err, rec.Value)
	}
	enq, ok := ev.Data.(schema.Enqueued)
	if !ok {
		t.Fatalf("job %s: %T on the enqueued topic", id, ev.Data)
	}
	var payload *string
	if len(enq.Job.Payload) > 0 {
		s := string(enq.Job.Payload)
		payload = &s
	}
	tags := enq.Job.Tags
	if tags == nil {
		tags = []string{}
	}
	ctx := context.Background()
	_, err = e.pool.Exec(ctx, `INSERT INTO fuzz_store VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb)`,
		enq.JobID, enq.Job.Type, enq.Job.Queue, enq.Job.Pool, tags, enq.IdempotencyKey, payload, string(rec.Value))
	if err != nil {
		t.Fatalf("job %s: Postgres cannot store the accepted job: %v\n%s", id, err, rec.Value)
	}
	var out string
	if err := e.pool.QueryRow(ctx, `SELECT coalesce(payload::text, '') || event::text FROM fuzz_store WHERE job_id = $1`, enq.JobID).Scan(&out); err != nil {
		t.Fatalf("job %s: reading the stored job back: %v", id, err)
	}
}

// await polls the enqueued topic until the record of job id is read.
func (e *fuzzEnv) await(t *testing.T, id string) *kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for e.seen[id] == nil {
		fs := e.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("job %s was accepted but its enqueued record never came", id)
		}
		fs.EachRecord(func(r *kgo.Record) { e.seen[string(r.Key)] = r })
	}
	return e.seen[id]
}

// TestStorableRuleMatchesPostgres: schema.CheckJSON refuses what jsonb
// refuses, on a real Postgres; and what it accepts, jsonb stores.
func TestStorableRuleMatchesPostgres(t *testing.T) {
	pool := testenv.Deps(t, api.Needs).Postgres
	docs := []string{
		`"\u0000"`, `{"a\u0000":1}`, `"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, "\"\xff\"", "\"\xed\xa0\x80\"",
		`1e1000000`, `1e-16384`, `0e-99999`, `[1.5e-16383]`,
		`"\ud83d\ude00"`, `"\u0001"`, `"\uffff"`, `1e308`, `-1e-340`, `123456789012345678901234567890`,
		`{"a":[1,{"b":"<>&"}]}`, `0e99999`, `"\\u0000"`,
	}
	for _, doc := range docs {
		var n int
		pgErr := pool.QueryRow(context.Background(), `SELECT length($1::jsonb::text)`, doc).Scan(&n)
		rule := schema.CheckJSON([]byte(doc))
		if rule == nil && pgErr != nil {
			t.Errorf("%q passes CheckJSON but Postgres refuses it: %v", doc, pgErr)
		}
		if rule != nil && pgErr == nil && !strings.Contains(rule.Error(), "number") {
			// Only the number bounds are stricter than Postgres (see schema).
			t.Errorf("%q fails CheckJSON (%v) but Postgres stores it", doc, rule)
		}
	}
	// What the worker and the webhooks log write is text: sanitized text
	// always stores.
	for _, s := range []string{"a\x00b", "a\xffb", "\xed\xa0\x80", strings.Repeat("é\x00", 3000)} {
		clean := schema.SanitizeText(s, 4096)
		if _, err := pool.Exec(context.Background(), `SELECT $1::text`, clean); err != nil {
			t.Errorf("SanitizeText(%q) = %q does not store: %v", s, clean, err)
		}
	}
}
