// Package pgstore opens Postgres pools and applies each component's
// versioned SQL migrations at start-up.
package pgstore

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Open connects a pool to url and checks it answers.
func Open(ctx context.Context, url string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = int32(maxConns)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: ping: %w", err)
	}
	return pool, nil
}

// Migrate applies the migrations of component found in fsys (files named
// NNNN_description.sql at its root), each in its own transaction, in version
// order, skipping those already recorded in ferry_migrations. An advisory
// lock serialises concurrent starts of several replicas.
func Migrate(ctx context.Context, pool *pgxpool.Pool, component string, fsys fs.FS) error {
	files, err := migrationFiles(fsys)
	if err != nil {
		return fmt.Errorf("pgstore: %s migrations: %w", component, err)
	}
	if _, ok := checkOnly.Load(pool); ok {
		return requireCurrent(ctx, pool, component, files)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(727274)`); err != nil {
		return fmt.Errorf("pgstore: migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(727274)`) //nolint:errcheck
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS ferry_migrations (
		component text NOT NULL, version int NOT NULL, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (component, version))`); err != nil {
		return fmt.Errorf("pgstore: create ferry_migrations: %w", err)
	}
	for _, f := range files {
		var done bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ferry_migrations WHERE component=$1 AND version=$2)`,
			component, f.version).Scan(&done); err != nil {
			return err
		}
		if done {
			continue
		}
		sql, err := fs.ReadFile(fsys, f.name)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO ferry_migrations (component, version, name) VALUES ($1, $2, $3)`,
				component, f.version, f.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("pgstore: %s migration %s: %w", component, f.name, err)
		}
	}
	return nil
}

// MigrateEmbedded applies the migrations of component found in the
// directory dir of fsys, typically an embed.FS declared beside the store:
//
//	//go:embed migrations/*.sql
//	var migrations embed.FS
//
//	pgstore.MigrateEmbedded(ctx, pool, "dlq", migrations, "migrations")
func MigrateEmbedded(ctx context.Context, pool *pgxpool.Pool, component string, fsys fs.FS, dir string) error {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		return fmt.Errorf("pgstore: %s migrations: %w", component, err)
	}
	return Migrate(ctx, pool, component, sub)
}

type migrationFile struct {
	version int
	name    string
}

func migrationFiles(fsys fs.FS) ([]migrationFile, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []migrationFile
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || path.Ext(e.Name()) != ".sql" {
			continue
		}
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: name must start with a version number and '_'", e.Name())
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("%s and %s share version %d", prev, e.Name(), v)
		}
		seen[v] = e.Name()
		out = append(out, migrationFile{version: v, name: e.Name()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// Querier runs queries: a pool, a connection or a transaction, so one
// function serves reads inside and outside a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
