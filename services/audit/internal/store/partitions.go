package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Partition is one monthly partition of audit_events.
type Partition struct {
	Name  string
	Start time.Time // inclusive
	End   time.Time // exclusive
}

var partitionName = regexp.MustCompile(`^audit_events_y(\d{4})m(\d{2})$`)

// MonthOf returns the partition holding t.
func MonthOf(t time.Time) Partition {
	t = t.UTC()
	start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	return Partition{
		Name:  fmt.Sprintf("audit_events_y%04dm%02d", start.Year(), int(start.Month())),
		Start: start,
		End:   start.AddDate(0, 1, 0),
	}
}

// EnsurePartitions creates the monthly partitions covering [from, to] that
// do not exist yet, each with its TRUNCATE guard. A month whose rows already
// sit in the default partition cannot be created (Postgres refuses: the
// rows would violate the default partition's new bound, and audit rows are
// never moved): it is returned in held, and the others are still created.
func (s *Store) EnsurePartitions(ctx context.Context, from, to time.Time) (created, held []string, err error) {
	var errs []error
	for p := MonthOf(from); !p.Start.After(to); p = MonthOf(p.End) {
		var exists bool
		if err := s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, p.Name).Scan(&exists); err != nil {
			return created, held, err
		}
		if exists {
			continue
		}
		ident := pgx.Identifier{p.Name}.Sanitize()
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF audit_events FOR VALUES FROM ('%s') TO ('%s')`,
				ident, p.Start.Format(time.RFC3339), p.End.Format(time.RFC3339))); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON %s
				FOR EACH STATEMENT EXECUTE FUNCTION audit_reject_change()`, ident))
			return err
		})
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			created = append(created, p.Name)
		case errors.As(err, &pgErr) && pgErr.Code == "42P07": // created meanwhile by another replica
		case errors.As(err, &pgErr) && pgErr.Code == "23514": // the month's rows are in the default partition
			held = append(held, p.Name)
		default:
			errs = append(errs, fmt.Errorf("audit: create partition %s: %w", p.Name, err))
		}
	}
	return created, held, errors.Join(errs...)
}

// Partitions lists the monthly partitions, oldest first.
func (s *Store) Partitions(ctx context.Context) ([]Partition, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'audit_events'::regclass ORDER BY c.relname`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []Partition
	for _, n := range names {
		m := partitionName.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		y, _ := strconv.Atoi(m[1])
		mo, _ := strconv.Atoi(m[2])
		out = append(out, MonthOf(time.Date(y, time.Month(mo), 1, 0, 0, 0, 0, time.UTC)))
	}
	return out, nil
}

// DropBefore drops every monthly partition that ends at or before cutoff.
// Before each drop it records, per chain, the last seq and hash the
// partition held (audit_chain_cuts), so verification treats the dropped
// rows as a clean cut rather than tampering. The drop and the cut records
// commit together. Rows are never deleted one by one.
func (s *Store) DropBefore(ctx context.Context, cutoff time.Time) (dropped []string, err error) {
	parts, err := s.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		if p.End.After(cutoff) {
			continue
		}
		ident := pgx.Identifier{p.Name}.Sanitize()
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			// Parent first, as inserts take it: no lock-order deadlock, and
			// no row can reach the partition between the cut and the drop.
			if _, err := tx.Exec(ctx, `LOCK TABLE audit_events IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`
				INSERT INTO audit_chain_cuts (chain_id, tenant_id, partition, last_seq, last_hash, rows_dropped)
				SELECT DISTINCT ON (chain_id) chain_id, tenant_id, $1, seq, hash, count(*) OVER (PARTITION BY chain_id)
				FROM %s ORDER BY chain_id, seq DESC`, ident), p.Name); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DROP TABLE `+ident)
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("audit: drop partition %s: %w", p.Name, err)
		}
		dropped = append(dropped, p.Name)
	}
	return dropped, nil
}

// Runway describes the partitions from the month of now on.
type Runway struct {
	// Ahead is how many consecutive months after the current one have
	// their partition: rows of the first month without one go to the
	// default partition, and that month can then never get its own.
	Ahead int
	// DefaultInUse is whether any row sits in the default partition.
	DefaultInUse bool
}

// Runway reads how far the monthly partitions reach beyond now.
func (s *Store) Runway(ctx context.Context, now time.Time) (Runway, error) {
	parts, err := s.Partitions(ctx)
	if err != nil {
		return Runway{}, err
	}
	have := make(map[string]bool, len(parts))
	for _, p := range parts {
		have[p.Name] = true
	}
	var r Runway
	for p := MonthOf(MonthOf(now).End); have[p.Name]; p = MonthOf(p.End) {
		r.Ahead++
	}
	err = s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM audit_events_default)`).Scan(&r.DefaultInUse)
	return r, err
}
