// Package opscmd implements the operator commands of the ferry binary:
// `ferry migrate` (schema migrations, the runtime role's grants and the
// audit partition upkeep) and
// `ferry doctor` (checks a deployment's connections and settings).
package opscmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/services/audit"

	// The stack imports every service, so every component's migrations
	// are registered with pgstore.
	_ "github.com/ferryhq/ferry/cmd/ferry/internal/stack"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // a check failed, a migration is pending or failed
	exitUsage = 2
)

const migrateUsage = `Usage: ferry migrate <command>

Runs every Ferry component's Postgres schema migrations, as the schema
owner (FERRY_POSTGRES_URL of a role with DDL rights), so that services can
run as a least-privilege role with FERRY_POSTGRES_MIGRATE=false.

Commands:
  status       list each component's applied and pending migrations; exit 1 if any is pending
  up           apply every pending migration, then do the audit partition
               upkeep below
  grant ROLE   grant ROLE what the services need and no more: SELECT, INSERT,
               UPDATE, DELETE on Ferry's tables, but only SELECT and INSERT on
               the audit tables (append-only); no DDL. Run after every "up".
  partitions [MONTHS]
               audit partition upkeep, which the runtime role cannot do:
               create the monthly audit partitions up to MONTHS (default 12)
               after the current month and drop those older than
               FERRY_AUDIT_RETENTION. Schedule it (monthly is plenty); the
               audit service alerts when fewer than 2 months are left.
`

// Migrate runs `ferry migrate <args...>` and returns the exit code.
func Migrate(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stdout, migrateUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmd := args[0]
	months, ok := migrateArgs(args)
	if !ok {
		fmt.Fprintf(stderr, "ferry migrate: bad arguments %q\n\n%s", args, migrateUsage)
		return exitUsage
	}
	pool, err := openPostgres(ctx, lookup)
	if err != nil {
		fmt.Fprintln(stderr, "ferry migrate:", err)
		return exitFail
	}
	defer pool.Close()
	switch cmd {
	case "status":
		err = migrateStatus(ctx, pool, stdout)
	case "up":
		err = migrateUp(ctx, pool, stdout)
		if err == nil {
			err = auditPartitions(ctx, pool, lookup, audit.OwnerPartitionsAhead, stdout)
		}
	case "partitions":
		err = auditPartitions(ctx, pool, lookup, months, stdout)
	default:
		err = GrantRuntime(ctx, pool, args[1])
		if err == nil {
			fmt.Fprintf(stdout, "granted %s the runtime privileges on %d tables\n", args[1], countTables(ctx, pool))
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "ferry migrate:", err)
		return exitFail
	}
	return exitOK
}

// migrateArgs checks the arguments of `ferry migrate` and returns the
// months of `partitions`.
func migrateArgs(args []string) (months int, ok bool) {
	switch args[0] {
	case "status", "up":
		return 0, len(args) == 1
	case "grant":
		return 0, len(args) == 2
	case "partitions":
		if len(args) == 1 {
			return audit.OwnerPartitionsAhead, true
		}
		n, err := strconv.Atoi(args[1])
		return n, err == nil && n >= 1 && n <= 120 && len(args) == 2
	}
	return 0, false
}

// openPostgres connects to FERRY_POSTGRES_URL.
func openPostgres(ctx context.Context, lookup func(string) (string, bool)) (*pgxpool.Pool, error) {
	l := config.NewLoader(lookup)
	url := l.String("FERRY_POSTGRES_URL")
	if url == "" {
		return nil, errors.New("FERRY_POSTGRES_URL is not set")
	}
	return pgstore.Open(ctx, url, 2)
}

// errPending is migrateStatus's answer when a migration is not applied.
var errPending = errors.New(`migrations are pending: run "ferry migrate up"`)

// migrateStatus prints one line per component.
func migrateStatus(ctx context.Context, pool *pgxpool.Pool, w io.Writer) error {
	anyPending := false
	for _, c := range components() {
		pending, err := c.Pending(ctx, pool)
		if err != nil {
			return err
		}
		if len(pending) == 0 {
			fmt.Fprintf(w, "%-12s current\n", c.Name)
			continue
		}
		anyPending = true
		fmt.Fprintf(w, "%-12s pending: %s\n", c.Name, strings.Join(pending, ", "))
	}
	if anyPending {
		return errPending
	}
	return nil
}

// foundation are the components service.Open migrates before any
// service's own, whose tables may reference theirs (tenants).
var foundation = []string{"auth", "projection", "quarantine"}

// components returns every registered component, the foundation first and
// then the others in registration order (package initialisation order,
// which is not a dependency order between unrelated packages).
func components() []pgstore.Component {
	all := pgstore.Registered()
	out := make([]pgstore.Component, 0, len(all))
	for _, name := range foundation {
		for _, c := range all {
			if c.Name == name {
				out = append(out, c)
			}
		}
	}
	for _, c := range all {
		if !slices.Contains(foundation, c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// migrateUp applies every component's pending migrations, the foundation
// first.
func migrateUp(ctx context.Context, pool *pgxpool.Pool, w io.Writer) error {
	for _, c := range components() {
		pending, err := c.Pending(ctx, pool)
		if err != nil {
			return err
		}
		if err := c.Apply(ctx, pool); err != nil {
			return err
		}
		if len(pending) > 0 {
			fmt.Fprintf(w, "%-12s applied: %s\n", c.Name, strings.Join(pending, ", "))
		} else {
			fmt.Fprintf(w, "%-12s current\n", c.Name)
		}
	}
	return nil
}

// auditPartitions creates the audit partitions up to months after the
// current one, drops those past FERRY_AUDIT_RETENTION, and prints what it
// did and the runway left.
func auditPartitions(ctx context.Context, pool *pgxpool.Pool, lookup func(string) (string, bool), months int, w io.Writer) error {
	l := config.NewLoader(lookup)
	retention := l.Duration("FERRY_AUDIT_RETENTION")
	if err := l.Err(); err != nil {
		return err
	}
	u, err := audit.MaintainPartitions(ctx, pool, retention, months, time.Now())
	for _, line := range []struct {
		what  string
		names []string
	}{{"created", u.Created}, {"dropped (past retention)", u.Dropped}, {"kept in the default partition (its rows arrived before its partition)", u.Held}} {
		if len(line.names) > 0 {
			fmt.Fprintf(w, "audit partitions %s: %s\n", line.what, strings.Join(line.names, ", "))
		}
	}
	fmt.Fprintf(w, "audit partitions: %d months ahead have their partition\n", u.Runway.Ahead)
	return err
}

// appendOnly are the tables whose rows the runtime role may add and read
// but never change: the audit trail (with its partitions) and the record
// of what retention cut from it.
var appendOnly = []string{"audit_events", "audit_chain_cuts"}

// GrantRuntime grants role the privileges Ferry's services need on the
// tables of the current schema, and no DDL: SELECT, INSERT, UPDATE and
// DELETE, except on the append-only audit tables and their partitions,
// where it gets SELECT and INSERT only. Privileges granted earlier beyond
// these are revoked, so running it again after an upgrade converges.
func GrantRuntime(ctx context.Context, pool *pgxpool.Pool, role string) error {
	r := pgx.Identifier{role}.Sanitize()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		stmts := []string{
			`GRANT USAGE ON SCHEMA ` + currentSchema + ` TO ` + r,
			`REVOKE ALL ON ALL TABLES IN SCHEMA ` + currentSchema + ` FROM ` + r,
			`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + currentSchema + ` TO ` + r,
			`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ` + currentSchema + ` TO ` + r,
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return revokeChanges(ctx, tx, r)
	})
}

// currentSchema is where Ferry's migrations create their tables: the
// default search_path's public schema.
const currentSchema = "public"

// revokeChanges leaves role only SELECT and INSERT on the append-only
// tables and every partition of them.
func revokeChanges(ctx context.Context, tx pgx.Tx, role string) error {
	rows, err := tx.Query(ctx, `
		SELECT c.oid::regclass::text FROM pg_class c WHERE c.relname = ANY($1) AND c.relnamespace = $2::regnamespace
		UNION
		SELECT i.inhrelid::regclass::text FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = ANY($1) AND p.relnamespace = $2::regnamespace`, appendOnly, currentSchema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := tx.Exec(ctx, `REVOKE UPDATE, DELETE, TRUNCATE ON `+t+` FROM `+role); err != nil {
			return fmt.Errorf("revoke changes on %s: %w", t, err)
		}
	}
	return nil
}

// countTables counts the tables of the schema, for the grant's summary.
func countTables(ctx context.Context, pool *pgxpool.Pool) int {
	var n int
	pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, currentSchema).Scan(&n) //nolint:errcheck // informational
	return n
}
