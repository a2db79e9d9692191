package main

import (
	"context"
	"fmt"
	"strings"
)

// probeMark opens every statement the probe sends while a workload runs,
// so the statement counts leave the probe's own polling out.
const probeMark = "/* ferry-bench */ "

// enableStatements creates the pg_stat_statements view in the stack's
// database (`ferry dev` preloads the module when Postgres ships it:
// platform/devstack). Without it the statement counts stay empty.
func (p *Probe) enableStatements(ctx context.Context) {
	_, _ = p.pg.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
}

// statements are the stack's top-level statements executed so far in this
// database by kind (statementKind), from pg_stat_statements; nil when the
// module is not loaded. dealloc is how many times the view evicted entries
// (pg_stat_statements_info): counts of evicted entries are lost.
func (p *Probe) statements(ctx context.Context) (kinds map[string]int64, dealloc int64) {
	rows, err := p.pg.Query(ctx, probeMark+`SELECT query, calls FROM pg_stat_statements
		WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		return nil, 0
	}
	defer rows.Close()
	kinds = map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		if rows.Scan(&q, &n) != nil {
			return nil, 0
		}
		if !strings.HasPrefix(q, probeMark) {
			kinds[statementKind(q)] += n
		}
	}
	if rows.Err() != nil {
		return nil, 0
	}
	_ = p.pg.QueryRow(ctx, probeMark+`SELECT dealloc FROM pg_stat_statements_info`).Scan(&dealloc)
	return kinds, dealloc
}

// statementKind names a statement by its command and the first table it
// names: "COPY audit_events", "UPDATE jobs", "BEGIN". Statements that
// differ only in their number of parameters (a batch's VALUES list) are
// one kind.
func statementKind(q string) string {
	words := strings.Fields(strings.NewReplacer("(", " ( ", ")", " ) ", ",", " , ", ";", " ").Replace(q))
	if len(words) == 0 {
		return "?"
	}
	cmd := strings.ToUpper(words[0])
	for i := 0; i+1 < len(words); i++ {
		switch strings.ToUpper(words[i]) {
		case "FROM", "INTO", "UPDATE", "COPY", "JOIN", "TABLE":
			t := strings.Trim(words[i+1], `"`)
			function := i+2 < len(words) && words[i+2] == "(" && strings.EqualFold(words[i], "FROM")
			if t != "(" && !strings.HasPrefix(t, "$") && !function && !strings.EqualFold(t, "LATERAL") {
				return cmd + " " + strings.ToLower(t)
			}
		}
	}
	return cmd
}

// statementsLine is the statements per job of n between a and b, with
// the six most frequent kinds, and their delta by kind; "" when a or b
// has none.
func statementsLine(a, b Counters, n int) (string, map[string]int64) {
	if a.Stmts == nil || b.Stmts == nil || n == 0 {
		return "", nil
	}
	delta, total := countDeltas(a.Stmts, b.Stmts)
	s := fmt.Sprintf("postgres statements %.3f (%s)", float64(total)/float64(n), topPerJob(delta, float64(n)))
	if b.StmtDealloc > a.StmtDealloc {
		s += " (UNDERCOUNTED: pg_stat_statements evicted entries during the run)"
	}
	return s, delta
}
