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
func (p *Probe) statements(ctx context.Context) (kinds map[string]int64, own probeCost, dealloc int64) {
	rows, err := p.pg.Query(ctx, probeMark+`SELECT query, calls, rows, total_exec_time FROM pg_stat_statements
		WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`)
	if err != nil {
		return nil, probeCost{}, 0
	}
	defer rows.Close()
	kinds = map[string]int64{}
	for rows.Next() {
		var q string
		var n, r int64
		var ms float64
		if rows.Scan(&q, &n, &r, &ms) != nil {
			return nil, probeCost{}, 0
		}
		if strings.HasPrefix(q, probeMark) {
			own = own.plus(probeCost{Calls: n, Rows: r, ExecMs: ms})
		} else {
			kinds[statementKind(q)] += n
		}
	}
	if rows.Err() != nil {
		return nil, probeCost{}, 0
	}
	_ = p.pg.QueryRow(ctx, probeMark+`SELECT dealloc FROM pg_stat_statements_info`).Scan(&dealloc)
	return kinds, own, dealloc
}

// probeCost is what the bench's own statements (probeMark) cost Postgres:
// they run beside the workload, so its CPU and rows fetched include them.
type probeCost struct {
	Calls, Rows int64
	ExecMs      float64 // execution time in Postgres, summed
}

func (c probeCost) plus(d probeCost) probeCost {
	return probeCost{c.Calls + d.Calls, c.Rows + d.Rows, c.ExecMs + d.ExecMs}
}

// probeLine says what the bench's own statements between a and b cost,
// so a reader can tell them from the workload's: "" when none ran.
func probeLine(a, b Counters) string {
	d := b.Own.plus(probeCost{-a.Own.Calls, -a.Own.Rows, -a.Own.ExecMs})
	if a.Stmts == nil || b.Stmts == nil || d.Calls <= 0 {
		return ""
	}
	return fmt.Sprintf("the bench's own statements in that window (in Postgres's CPU and rows above): %d, returning %d rows, %.1f ms executing", d.Calls, d.Rows, d.ExecMs)
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
