package main

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/audit"
)

// TestAuditPartitionsWithoutDDL: the runtime role cannot create audit
// partitions. `ferry migrate up` creates a year of them as the owner; when
// the runway has run out anyway, the service running as the runtime role
// says so (log and metric) and what to run, its rows still land (in the
// default partition), and `ferry migrate partitions` restores the runway.
func TestAuditPartitionsWithoutDDL(t *testing.T) {
	ctx := context.Background()
	owner := testenv.Postgres(t)
	vars := map[string]string{"FERRY_POSTGRES_URL": owner}
	code, out := ferryOps(t, vars, "migrate", "up")
	if code != 0 || !strings.Contains(out, "audit partitions created: ") || !strings.Contains(out, monthPartition(12)) ||
		!strings.Contains(out, "audit partitions: 12 months ahead have their partition") {
		t.Fatalf("migrate up: exit %d\n%s", code, out)
	}
	role, roleURL := runtimeRole(t, owner)
	if code, out := ferryOps(t, vars, "migrate", "grant", role); code != 0 {
		t.Fatalf("grant: exit %d, %s", code, out)
	}
	ownerConn, err := pgx.Connect(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	defer ownerConn.Close(ctx)
	dropMonthlyPartitions(t, ownerConn) // the runway ran out

	logs := maintainAs(t, roleURL)
	for _, want := range []string{"no DDL rights", "run `ferry migrate partitions` as the schema owner", "partition runway short", `"months_ahead":0`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the runtime role's maintenance log lacks %q:\n%s", want, logs)
		}
	}

	// Rows still land: in the default partition.
	e := startStack(t, map[string]string{"FERRY_POSTGRES_URL": roleURL, "FERRY_POSTGRES_MIGRATE": "false"})
	id := e.submit(map[string]any{"type": "noop"})
	e.waitStatus(id, "succeeded", 30*time.Second)
	waitFor(t, 30*time.Second, "the job's audit rows in the default partition", func() bool {
		var n int
		return ownerConn.QueryRow(ctx, `SELECT count(*) FROM audit_events_default WHERE job_id = $1`, id).Scan(&n) == nil && n > 0
	})
	e.waitGauge("ferry_audit_partitions_ahead", "0")
	e.waitGauge("ferry_audit_default_partition_in_use", "1")

	// The owner's upkeep restores the runway; this month's rows stay where
	// they are.
	code, out = ferryOps(t, vars, "migrate", "partitions", "3")
	next := monthPartition(1)
	if code != 0 || !strings.Contains(out, "kept in the default partition (its rows arrived before its partition): "+monthPartition(0)) ||
		!strings.Contains(out, "created: ") || !strings.Contains(out, next) || !strings.Contains(out, "3 months ahead have their partition") {
		t.Fatalf("migrate partitions: exit %d\n%s", code, out)
	}
	e.waitGauge("ferry_audit_partitions_ahead", "3")
	if logs := maintainAs(t, roleURL); strings.Contains(logs, "runway short") {
		t.Errorf("runway reported short after the upkeep:\n%s", logs)
	}
	if code, out := ferryOps(t, vars, "migrate", "partitions", "0"); code != 2 {
		t.Errorf("migrate partitions 0: exit %d, want 2 (usage)\n%s", code, out)
	}
}

// monthPartition names the audit partition of the month n months from now.
func monthPartition(n int) string {
	now := time.Now().UTC()
	m := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, n, 0)
	return fmt.Sprintf("audit_events_y%04dm%02d", m.Year(), int(m.Month()))
}

// dropMonthlyPartitions drops every monthly audit partition, as the owner.
func dropMonthlyPartitions(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_events'::regclass AND c.relname <> 'audit_events_default'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) == 0 {
		t.Fatalf("monthly partitions %v: %v", names, err)
	}
	for _, n := range names {
		if _, err := conn.Exec(ctx, `DROP TABLE `+pgx.Identifier{n}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
}

// maintainAs runs the audit service's start-up and one maintenance as the
// role of roleURL (no migrations) and returns what it logged.
func maintainAs(t *testing.T, roleURL string) string {
	t.Helper()
	var buf testenv.LogBuffer
	l := config.NewLoader(lookupOf(map[string]string{"FERRY_POSTGRES_URL": roleURL, "FERRY_POSTGRES_MIGRATE": "false"}))
	common := config.LoadCommon(l)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	deps, err := service.Open(context.Background(), common, slog.New(slog.NewJSONHandler(&buf, nil)), service.Needs{Postgres: true})
	if err != nil {
		t.Fatal(err)
	}
	defer deps.Close()
	svc, err := audit.New(t.Context(), deps, audit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Maintain(context.Background())
	return buf.String()
}

// waitGauge waits until /metrics shows the unlabelled (but for OTel scope
// labels) gauge name with value want.
func (e *e2e) waitGauge(name, want string) {
	e.t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	var got string
	waitFor(e.t, 30*time.Second, name+" = "+want, func() bool {
		m := re.FindStringSubmatch(scrapeText(e.t, e.base+"/metrics"))
		if m != nil {
			got = m[2]
		}
		return got == want
	})
}
