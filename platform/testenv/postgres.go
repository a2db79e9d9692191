package testenv

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/pgstore"
)

// Postgres creates a database for the calling test on the server named by
// FERRY_TEST_POSTGRES_URL and returns its URL. The database is new and empty,
// named after the test, and dropped when the test ends, even if connections
// to it are still open. Tests, parallel or not, never share a database.
func Postgres(t testing.TB) string {
	t.Helper()
	base := requireEnv(t, PostgresURLEnv)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("testenv: %s=%q is not a postgres:// URL: %v", PostgresURLEnv, base, err)
	}
	name := databaseName(t.Name())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testenv: connect to %s: %v (is the server up? %s)", PostgresURLEnv, err, howToRun)
	}
	defer conn.Close(context.Background())
	if err := createDatabase(ctx, conn, name); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		// FORCE ends the sessions of pools the test left open.
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})

	u.Path = "/" + name
	return u.String()
}

// createDatabase creates name, retrying while another session holds the
// template database open.
func createDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	for {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use: template1 busy
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// databaseName turns a test name into a unique, valid database name of at
// most 63 bytes, such as "t_testjobs_cancel_3f9a1c2b".
func databaseName(testName string) string {
	var b strings.Builder
	b.WriteString("t_")
	underscore := true
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 48 {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			underscore = false
		} else if !underscore {
			b.WriteByte('_')
			underscore = true
		}
	}
	if !underscore {
		b.WriteByte('_')
	}
	b.WriteString(randomSuffix(12))
	return b.String()
}

// Pool is a pool of at most maxConns connections on a database of the
// test's own (Postgres), opened as the services open theirs (pgstore.Open)
// and closed when the test ends.
func Pool(t testing.TB, maxConns int) *pgxpool.Pool {
	t.Helper()
	pool, err := pgstore.Open(context.Background(), Postgres(t), maxConns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Column returns the first column, as text, of every row sql returns
// (an EXPLAIN's plan lines, a list of names), failing the test on an
// error.
func Column(t testing.TB, q Querier, sql string, args ...any) []string {
	t.Helper()
	rows, err := q.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}
