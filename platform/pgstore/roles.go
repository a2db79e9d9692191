package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Component is one component's embedded schema migrations, declared once
// with [Register] so that `ferry migrate` knows every component of the
// binary without a second list to keep in step.
type Component struct {
	Name string
	// FS holds the NNNN_name.sql files at its root.
	FS fs.FS
}

var registry struct {
	sync.Mutex
	list []Component
}

// Register declares the migrations of component found in the directory dir
// of fsys (typically an embed.FS beside the store) and returns them:
//
//	//go:embed migrations/*.sql
//	var migrations embed.FS
//
//	var Migrations = pgstore.Register("dlq", migrations, "migrations")
//
// Components register as their packages initialise; [Registered] lists
// them in that order, which orders a package after its imports only, not
// after components whose tables its migrations reference.
func Register(component string, fsys fs.FS, dir string) Component {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(fmt.Sprintf("pgstore: register %s: %v", component, err)) // a programming error
	}
	c := Component{Name: component, FS: sub}
	registry.Lock()
	defer registry.Unlock()
	for _, r := range registry.list {
		if r.Name == component {
			panic("pgstore: component " + component + " registered twice")
		}
	}
	registry.list = append(registry.list, c)
	return c
}

// Registered returns every registered component, in registration order.
func Registered() []Component {
	registry.Lock()
	defer registry.Unlock()
	return slices.Clone(registry.list)
}

func registered(component string) bool {
	return slices.ContainsFunc(Registered(), func(c Component) bool { return c.Name == component })
}

// Apply applies c's migrations to pool (or, on a pool given to
// [RequireMigrated], checks they are applied).
func (c Component) Apply(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrate(ctx, pool, c.Name, c.FS)
}

// Pending returns the names of c's migrations not yet applied.
func (c Component) Pending(ctx context.Context, q Querier) ([]string, error) {
	files, err := migrationFiles(c.FS)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s migrations: %w", c.Name, err)
	}
	return pending(ctx, q, c.Name, files)
}

// checkOnly holds the pools whose components must not migrate but only
// check that their migrations were applied (by `ferry migrate`).
var checkOnly sync.Map

// RequireMigrated makes every Migrate on pool check instead of apply, for
// a service that runs with a role without DDL rights
// (FERRY_POSTGRES_MIGRATE=false); the returned function undoes it when the
// pool is closed.
func RequireMigrated(pool *pgxpool.Pool) (forget func()) {
	checkOnly.Store(pool, struct{}{})
	return func() { checkOnly.Delete(pool) }
}

// requireCurrent fails, saying what to run, when a migration of component
// is not applied.
func requireCurrent(ctx context.Context, q Querier, component string, files []migrationFile) error {
	missing, err := pending(ctx, q, component, files)
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	hint := `run "ferry migrate up" with the schema owner's FERRY_POSTGRES_URL first`
	if !registered(component) {
		hint = "the component is not registered with pgstore.Register, so `ferry migrate` cannot apply it (a bug)"
	}
	return fmt.Errorf("pgstore: %s migrations not applied (%s) and FERRY_POSTGRES_MIGRATE=false: %s",
		component, strings.Join(missing, ", "), hint)
}

// pending returns the files of component not recorded in ferry_migrations;
// all of them when that table does not exist yet.
func pending(ctx context.Context, q Querier, component string, files []migrationFile) ([]string, error) {
	done, err := appliedVersions(ctx, q, component)
	if undefinedTable(err) {
		return names(files), nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: read ferry_migrations: %w", err)
	}
	var out []string
	for _, f := range files {
		if !done[f.version] {
			out = append(out, f.name)
		}
	}
	return out, nil
}

func names(files []migrationFile) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.name
	}
	return out
}

// appliedVersions returns the versions of component in ferry_migrations.
func appliedVersions(ctx context.Context, q Querier, component string) (map[int]bool, error) {
	rows, err := q.Query(ctx, `SELECT version FROM ferry_migrations WHERE component = $1`, component)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		done[v] = true
	}
	return done, rows.Err()
}

// undefinedTable reports whether err is Postgres's "relation does not exist".
func undefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
