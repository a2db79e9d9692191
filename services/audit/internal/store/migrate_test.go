package store

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/audit/internal/chain"
)

// oldData are event data as the jsonb column stored them: each is hashed
// over the text Postgres rendered for its jsonb (keys reordered, a repeated
// key dropped, spaces added, numbers and escapes rewritten), and the last
// over the JSON string the old fallback kept for data jsonb refused.
var oldData = []struct{ sent, fallback string }{
	{sent: `{"z":1,"a":{"y":[1.50,1E+2,-0.0]},"a":2}`},
	{sent: `{"msg":"caf\u00e9 \u2603","n":12345678901234567890.123456789}`},
	{sent: `[]`},
	{sent: `{"error":{"message":"x\u0000y"}}`, fallback: `to_jsonb($1::text)`},
}

// TestMigrationToJSONKeepsOldHashes writes rows on the schema before data
// became json, as the projection wrote them then (hashed over data::text
// of the jsonb), in a monthly partition and in the default one; migrates;
// and verifies every chain, old rows and a row appended after the
// migration that extends an old chain.
func TestMigrationToJSONKeepsOldHashes(t *testing.T) {
	ctx := context.Background()
	pool := testenv.Pool(t, 4)
	migrateBeforeJSON(t, pool)
	now := time.Now().UTC()
	s := New(pool, slog.New(slog.DiscardHandler), func() time.Time { return now })
	if _, _, err := s.EnsurePartitions(ctx, now, now); err != nil {
		t.Fatal(err)
	}
	progress := chain.ID("acme", "ferry.jobs.progress", 0)
	want := writeOldRows(t, pool, progress, now.Add(-time.Minute))
	// Far beyond the partitions made: the default partition.
	for k, v := range writeOldRows(t, pool, chain.ID("acme", "ferry.jobs.started", 0), now.AddDate(2, 0, 0)) {
		want[k] = v
	}

	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var notJSON int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attname = 'data' AND atttypid <> 'json'::regtype
		AND attrelid IN (SELECT 'audit_events'::regclass UNION ALL SELECT inhrelid FROM pg_inherits WHERE inhparent = 'audit_events'::regclass)`,
	).Scan(&notJSON); err != nil || notJSON != 0 {
		t.Fatalf("data columns not json: %d (%v)", notJSON, err)
	}
	for id, text := range want {
		var got string
		if err := pool.QueryRow(ctx, `SELECT data::text FROM audit_events WHERE event_id = $1`, id).Scan(&got); err != nil || got != text {
			t.Errorf("event %s: data %q after the migration, %q before (%v)", id, got, text, err)
		}
	}
	appendProgress(t, pool, s, now)
	rep, err := s.Verify(ctx, "", 3)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.ChainsChecked != 2 || rep.RowsChecked != int64(len(want)+1) {
		t.Fatalf("verify after the migration: %+v", rep)
	}
}

// migrateBeforeJSON applies the audit schema as it was before data became
// json: the audit component's first migration and the index migrations.
func migrateBeforeJSON(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	first, err := fs.ReadFile(migrations, "migrations/0001_audit.sql")
	if err != nil {
		t.Fatal(err)
	}
	old := fstest.MapFS{"0001_audit.sql": {Data: first}}
	if err := pgstore.Migrate(context.Background(), pool, "audit", old); err != nil {
		t.Fatal(err)
	}
	if err := IndexMigrations.Apply(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	var typ string
	if err := pool.QueryRow(context.Background(), `SELECT atttypid::regtype::text FROM pg_attribute
		WHERE attrelid = 'audit_events'::regclass AND attname = 'data'`).Scan(&typ); err != nil || typ != "jsonb" {
		t.Fatalf("the old schema's data is %q (%v)", typ, err)
	}
}

// writeOldRows appends oldData to chainID at time at the way the
// projection did while data was jsonb, and returns each row's data::text.
func writeOldRows(t *testing.T, pool *pgxpool.Pool, chainID string, at time.Time) map[string]string {
	t.Helper()
	ctx := context.Background()
	texts := map[string]string{}
	pos := chain.Position{Hash: chain.Genesis}
	for i, d := range oldData {
		cast := "$1::jsonb"
		if d.fallback != "" {
			cast = d.fallback
		}
		var canonical string
		if err := pool.QueryRow(ctx, `SELECT (`+cast+`)::text`, d.sent).Scan(&canonical); err != nil {
			t.Fatal(err)
		}
		r := chain.Row{ChainID: chainID, Seq: pos.Seq + 1, PrevHash: pos.Hash, EventID: schema.NewEventID(), TenantID: "acme",
			JobID: "job_old", Type: "progress", Attempt: 1, Occurred: at.Add(time.Duration(i) * time.Second).Truncate(time.Microsecond),
			Actor: "ferry/worker", Data: []byte(canonical)}
		h := chain.Hash(r)
		if _, err := pool.Exec(ctx, `INSERT INTO audit_events (event_id, tenant_id, job_id, type, attempt, occurred_at, actor, data, chain_id, seq, prev_hash, hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11, $12)`,
			r.EventID, r.TenantID, r.JobID, r.Type, r.Attempt, r.Occurred, r.Actor, canonical, r.ChainID, r.Seq, r.PrevHash, h); err != nil {
			t.Fatal(err)
		}
		texts[r.EventID] = canonical
		pos = chain.Position{Seq: r.Seq, Hash: h}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO audit_chain_heads (chain_id, tenant_id, seq, hash) VALUES ($1, 'acme', $2, $3)`,
		chainID, pos.Seq, pos.Hash); err != nil {
		t.Fatal(err)
	}
	return texts
}

// appendProgress applies a progress event of tenant acme from partition 0
// of its topic, so it extends that old chain, and checks its data is
// stored as the record carried it.
func appendProgress(t *testing.T, pool *pgxpool.Pool, s *Store, now time.Time) {
	t.Helper()
	ctx := context.Background()
	data := schema.Progress{JobRef: schema.JobRef{JobID: "job_new", TenantID: "acme", Attempt: 1}, WorkerID: "w1", DispatchID: "d1", Percent: 40, At: now}
	value, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	id := schema.NewEventID()
	rec := schema.NewRecordAt(schema.Topics{Prefix: "ferry."}.Lifecycle(data.EventType()), "ferry/worker", data, value, id, now)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return s.Apply(ctx, tx, []*kgo.Record{rec}) }); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := pool.QueryRow(ctx, `SELECT data::text FROM audit_events WHERE event_id = $1`, id).Scan(&got); err != nil || got != string(value) {
		t.Fatalf("new row's data %q, want %q (%v)", got, value, err)
	}
}
