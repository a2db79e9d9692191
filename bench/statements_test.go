package main

import "testing"

func TestStatementKind(t *testing.T) {
	for q, want := range map[string]string{
		"BEGIN": "BEGIN",
		"SET LOCAL plan_cache_mode = force_custom_plan":      "SET",
		`COPY "audit_events" ("id", "tenant_id") FROM STDIN`: "COPY audit_events",
		"UPDATE jobs SET status = $1 WHERE id = $2":          "UPDATE jobs",
		"INSERT INTO ferry_offsets (g, t, p, o) VALUES ($1, $2, $3, $4), ($5, $6, $7, $8) ON CONFLICT (g, t, p) DO UPDATE SET o = excluded.o": "INSERT ferry_offsets",
		"SELECT j.* FROM unnest($1::text[], $2::text[]) AS k(t, i) JOIN LATERAL (SELECT * FROM jobs WHERE tenant_id = k.t) j ON true":         "SELECT jobs",
		"with x as (select 1) select * from x": "WITH x",
		"":                                     "?",
	} {
		if got := statementKind(q); got != want {
			t.Errorf("statementKind(%q) = %q, want %q", q, got, want)
		}
	}
}

// probeLine reports the bench's own statements of the window only, and
// nothing when pg_stat_statements is not there or none ran.
func TestProbeLine(t *testing.T) {
	a := Counters{Stmts: map[string]int64{}, Own: probeCost{Calls: 10, Rows: 100, ExecMs: 5}}
	b := Counters{Stmts: map[string]int64{}, Own: probeCost{Calls: 145, Rows: 1100, ExecMs: 65.5}}
	want := "the bench's own statements in that window (in Postgres's CPU and rows above): 135, returning 1000 rows, 60.5 ms executing"
	if got := probeLine(a, b); got != want {
		t.Errorf("probeLine = %q, want %q", got, want)
	}
	if got := probeLine(a, a); got != "" {
		t.Errorf("no statements in the window: %q", got)
	}
	if got := probeLine(Counters{}, b); got != "" {
		t.Errorf("without pg_stat_statements: %q", got)
	}
}
