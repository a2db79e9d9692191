package scheduler

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the scheduler schema migrations; `ferry migrate` applies them.
var Migrations = pgstore.Register("scheduler", migrations, "migrations")

// Migrate applies the scheduler's migrations (the paused queues).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrations.Apply(ctx, pool)
}

// The fair share reads each tenant's weight and max_running, and the paused
// queues, from Redis (tenant:<t>:cfg, tenant:<t>:paused). Their source is
// Postgres: the shared tenants table (written by the api's admin routes) and
// scheduler_queue_pauses. syncLoop copies them into Redis every
// SettingsRefresh, so a PATCH of a tenant takes effect within about that
// long on every replica, and a Redis that lost its state gets them back.

// syncLoop pushes tenant settings and pauses into Redis until ctx ends.
func (s *Service) syncLoop(ctx context.Context) error {
	if s.deps.Postgres == nil {
		return nil // no tenants table: every tenant has weight 1, no max_running
	}
	service.Every(ctx, s.cfg.SettingsRefresh, func(ctx context.Context) {
		if err := s.syncSettings(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("syncing tenant settings into Redis", "err", err)
		}
	})
	return nil
}

// syncSettings copies every tenant's weight and max_running, and every
// paused queue, into Redis.
func (s *Service) syncSettings(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pg := s.deps.Postgres
	rows, err := pg.Query(ctx, `SELECT id, weight, COALESCE((settings->>'max_running')::int, 0), settings->'flow_control' FROM tenants`)
	if err != nil {
		return fmt.Errorf("read tenants: %w", err)
	}
	ts := map[string]qstore.TenantSettings{}
	flow := map[string]qstore.FlowSettings{}
	for rows.Next() {
		var id string
		var st qstore.TenantSettings
		var fc []byte
		if err := rows.Scan(&id, &st.Weight, &st.MaxRunning, &fc); err != nil {
			rows.Close()
			return fmt.Errorf("read tenants: %w", err)
		}
		ts[id] = st
		if f, ok := s.flowSettings(id, fc); ok {
			flow[id] = f
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read tenants: %w", err)
	}
	rows, err = pg.Query(ctx, `SELECT tenant_id, queue FROM scheduler_queue_pauses`)
	if err != nil {
		return fmt.Errorf("read paused queues: %w", err)
	}
	paused := map[string][]string{}
	for rows.Next() {
		var t, q string
		if err := rows.Scan(&t, &q); err != nil {
			rows.Close()
			return fmt.Errorf("read paused queues: %w", err)
		}
		paused[t] = append(paused[t], q)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read paused queues: %w", err)
	}
	if err := s.store.SetTenants(ctx, ts); err != nil {
		return err
	}
	if err := s.store.SetFlowControl(ctx, s.cfg.Now(), flow); err != nil {
		return err
	}
	return s.store.SetPaused(ctx, paused)
}
