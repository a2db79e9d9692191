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
