package api

import (
	"context"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/services/api/internal/schedules"
)

// Changes to a tenant's configuration — its schedules, its settings — are
// published on the changes topic for the audit log (docs/audit.md). A
// change is recorded before it commits: when the record cannot be
// produced the change is refused (503 unavailable) and not made, so none
// commits unrecorded. (A commit that fails after the record was produced
// leaves a record of a change the caller was told failed.)

// produceChange produces a change record and waits for it.
func (s *Service) produceChange(ctx context.Context, data schema.Data) error {
	rec, err := schema.NewRecord(s.deps.Topics.Changes(), source, data)
	if err != nil {
		return err
	}
	if err := s.deps.Kafka.ProduceSync(ctx, rec).FirstErr(); err != nil {
		s.log.ErrorContext(ctx, "produce change failed", "type", data.CEType(), "tenant", data.Tenant(), "subject", data.Subject(), "err", err)
		return errUnavailable
	}
	return nil
}

// settingsOrNil are sc's settings, nil when there is no schedule (before a
// create, after a delete).
func settingsOrNil(sc *schedules.Schedule) any {
	if sc == nil {
		return nil
	}
	return settingsOf(*sc)
}

// scheduleRecorder records action on a schedule, inside the store's
// transaction (schedules.Recorder), as the caller's API key.
func (s *Service) scheduleRecorder(action string) schedules.Recorder {
	return func(ctx context.Context, before, after *schedules.Schedule) error {
		p, _ := auth.FromContext(ctx)
		changes, err := schema.Changes(settingsOrNil(before), settingsOrNil(after))
		if err != nil {
			return err
		}
		sc := after
		if sc == nil {
			sc = before
		}
		ev := schema.ScheduleChanged{TenantID: sc.TenantID, ScheduleID: sc.ID, Name: sc.Name, Action: action,
			Actor: p.KeyID, Changes: changes, At: s.cfg.Now().UTC()}
		if action == schema.ActionTriggered {
			ev.JobID = sc.LastJobID
		}
		if err := s.produceChange(ctx, ev); err != nil {
			return err
		}
		s.log.InfoContext(ctx, "schedule "+action, "tenant", sc.TenantID, "schedule_id", sc.ID, "name", sc.Name, "actor", p.KeyID)
		return nil
	}
}

// tenantSettings is the tenant resource without what no change sets (its
// id, its times): what a change record compares.
func tenantSettings(t auth.Tenant) Tenant {
	r := tenantResource(t)
	r.ID, r.DisabledAt, r.CreatedAt = "", nil, time.Time{}
	return r
}

// recordTenantChange records an operator's change of tenant cur as upd,
// before it is stored.
func (s *Service) recordTenantChange(ctx context.Context, cur auth.Tenant, upd auth.TenantUpdate) error {
	next := cur
	if upd.Name != nil {
		next.Name = *upd.Name
	}
	if upd.Weight != nil {
		next.Weight = *upd.Weight
	}
	if upd.Settings != nil {
		next.Settings = *upd.Settings
	}
	if upd.Disabled != nil {
		next.DisabledAt = nil
		if *upd.Disabled {
			next.DisabledAt = &time.Time{}
		}
	}
	return s.recordTenant(ctx, schema.ActionUpdated, &cur, next)
}

// recordTenant produces a TenantChanged of action from before (nil when
// created) to after, as the caller's API key.
func (s *Service) recordTenant(ctx context.Context, action string, before *auth.Tenant, after auth.Tenant) error {
	p, _ := auth.FromContext(ctx)
	var from any
	if before != nil {
		from = tenantSettings(*before)
	}
	changes, err := schema.Changes(from, tenantSettings(after))
	if err != nil {
		return err
	}
	return s.produceChange(ctx, schema.TenantChanged{TenantID: after.ID, Action: action, Actor: p.KeyID,
		Changes: changes, At: s.cfg.Now().UTC()})
}
