package scheduler

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/auth"
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
// Postgres: the tenants' settings, which platform/auth owns and reads for
// us (auth.ListDispatchSettings; the api's admin routes write them), and
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

// syncSettings copies every tenant's weight, max_running and flow control,
// and every paused queue, into Redis.
func (s *Service) syncSettings(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ts, flow, err := s.readTenantSettings(ctx)
	if err != nil {
		return err
	}
	gen, err := s.store.PauseGeneration(ctx) // before the snapshot: see SetPaused
	if err != nil {
		return err
	}
	paused, err := readPaused(ctx, s.deps.Postgres)
	if err != nil {
		return err
	}
	if err := s.store.SetTenants(ctx, ts); err != nil {
		return err
	}
	if err := s.store.SetFlowControl(ctx, s.cfg.Now(), flow); err != nil {
		return err
	}
	if applied, err := s.store.SetPaused(ctx, gen, paused); err != nil || applied {
		return err
	}
	s.log.Debug("a queue was paused or resumed during the settings sync; pauses are copied next round")
	return nil
}

// readTenantSettings asks platform/auth for every tenant's dispatch
// settings, in the shapes the dispatch script reads. A tenant whose flow
// control cannot be read is logged and dispatches without it.
func (s *Service) readTenantSettings(ctx context.Context) (map[string]qstore.TenantSettings, map[string]qstore.FlowSettings, error) {
	all, err := auth.ListDispatchSettings(ctx, s.deps.Postgres)
	if err != nil {
		return nil, nil, err
	}
	ts := make(map[string]qstore.TenantSettings, len(all))
	flow := map[string]qstore.FlowSettings{}
	for _, d := range all {
		ts[d.TenantID] = qstore.TenantSettings{Weight: d.Weight, MaxRunning: d.MaxRunning}
		if d.FlowControlErr != nil {
			s.log.Warn("ignoring a tenant's unreadable flow_control settings", "tenant", d.TenantID, "err", d.FlowControlErr)
		}
		if f, ok := flowSettings(d.FlowControl); ok {
			flow[d.TenantID] = f
		}
	}
	return ts, flow, nil
}

// readPaused returns the paused queues of every tenant.
func readPaused(ctx context.Context, pg *pgxpool.Pool) (map[string][]string, error) {
	rows, err := pg.Query(ctx, `SELECT tenant_id, queue FROM scheduler_queue_pauses`)
	if err != nil {
		return nil, fmt.Errorf("read paused queues: %w", err)
	}
	pairs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Tenant, Queue string }])
	if err != nil {
		return nil, fmt.Errorf("read paused queues: %w", err)
	}
	paused := map[string][]string{}
	for _, p := range pairs {
		paused[p.Tenant] = append(paused[p.Tenant], p.Queue)
	}
	return paused, nil
}
