package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Records of changes people make to a tenant's configuration — its
// schedules and its settings (limits, flow control) — rather than to a job.
// The api publishes them on the changes topic before the change commits,
// so no change is made unrecorded; the audit log keeps them beside the
// jobs' events (docs/audit.md).

// CloudEvents types of the change records.
const (
	CETypeScheduleChanged = "ferry.schedule.changed.v1"
	CETypeTenantChanged   = "ferry.tenant.changed.v1"
)

// What was done to a schedule or a tenant.
const (
	ActionCreated   = "created"
	ActionUpdated   = "updated"
	ActionPaused    = "paused"
	ActionResumed   = "resumed"
	ActionTriggered = "triggered"
	ActionDeleted   = "deleted"
)

// FieldChange is one setting that changed: its value before and after, as
// JSON (null when it was or became unset).
type FieldChange struct {
	Field string          `json:"field"`
	From  json.RawMessage `json:"from"`
	To    json.RawMessage `json:"to"`
}

// Changes lists the top-level JSON fields whose encodings differ between
// before and after, in field order; a nil before (created) or after
// (deleted) makes every field of the other one a change.
func Changes(before, after any) ([]FieldChange, error) {
	b, err := jsonFields(before)
	if err != nil {
		return nil, err
	}
	a, err := jsonFields(after)
	if err != nil {
		return nil, err
	}
	var out []FieldChange
	for _, f := range slices.Sorted(maps.Keys(mergeKeys(a, b))) {
		from, to := orNull(b[f]), orNull(a[f])
		if !bytes.Equal(from, to) {
			out = append(out, FieldChange{Field: f, From: from, To: to})
		}
	}
	return out, nil
}

// jsonFields encodes v (a struct, a map or nil) and splits its top-level
// fields.
func jsonFields(v any) (map[string]json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("schema: changes: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("schema: changes: %T is not a JSON object: %w", v, err)
	}
	return m, nil
}

func mergeKeys(a, b map[string]json.RawMessage) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// ScheduleChanged is a schedule being created, changed, paused, resumed,
// triggered or deleted through the API.
type ScheduleChanged struct {
	TenantID   string `json:"tenant_id"`
	ScheduleID string `json:"schedule_id"`
	// Name is the schedule's name after the change (before, when deleted).
	Name string `json:"name"`
	// Action is one of the Action constants.
	Action string `json:"action"`
	// Actor is the API key id that made the change.
	Actor string `json:"actor"`
	// Changes are the settings that changed (name, cron, timezone, job,
	// overlap, catchup, catchup_limit, paused): all of them from null when
	// created, all of them to null when deleted, none when triggered or
	// when the change changed nothing.
	Changes []FieldChange `json:"changes,omitempty"`
	// JobID is the job a trigger submitted.
	JobID string    `json:"job_id,omitempty"`
	At    time.Time `json:"at"`
}

func (ScheduleChanged) CEType() string { return CETypeScheduleChanged }

// Subject is the schedule id: one schedule's changes keep their order.
func (c ScheduleChanged) Subject() string { return c.ScheduleID }
func (c ScheduleChanged) Tenant() string  { return c.TenantID }

func (c ScheduleChanged) validate() error {
	if c.TenantID == "" || c.ScheduleID == "" || c.Action == "" {
		return errors.New("tenant_id, schedule_id and action are required")
	}
	return nil
}

// TenantChanged is a tenant being created or its settings changed by an
// operator (the admin routes).
type TenantChanged struct {
	TenantID string `json:"tenant_id"`
	// Action is ActionCreated or ActionUpdated.
	Action string `json:"action"`
	// Actor is the API key id that made the change ("admin" for the admin key).
	Actor string `json:"actor"`
	// Changes are the settings that changed, by their name in the tenant
	// resource (name, weight, disabled, rate_limit, max_running,
	// flow_control, …).
	Changes []FieldChange `json:"changes,omitempty"`
	At      time.Time     `json:"at"`
}

func (TenantChanged) CEType() string { return CETypeTenantChanged }

// Subject is the tenant id.
func (c TenantChanged) Subject() string { return c.TenantID }
func (c TenantChanged) Tenant() string  { return c.TenantID }

func (c TenantChanged) validate() error {
	if c.TenantID == "" || c.Action == "" {
		return errors.New("tenant_id and action are required")
	}
	return nil
}

// Changes is the topic of the change records (schedules, tenants).
func (t Topics) Changes() string { return t.prefix() + "changes" }

// Audited is a record the audit log keeps that is not a job's lifecycle
// event: a breaker's state change or a change to a tenant's configuration.
// Its audit row has no job id; it is found by its AuditType.
type Audited interface {
	Data
	// AuditType is the row's type (breaker.changed, schedule.changed, …).
	AuditType() string
	// AuditActor is who caused it ("" when a service did: the row's actor
	// is then the emitting service).
	AuditActor() string
}

// The audit types of the Audited records.
const (
	AuditBreakerChanged  = "breaker.changed"
	AuditScheduleChanged = "schedule.changed"
	AuditTenantChanged   = "tenant.changed"
)

func (BreakerChanged) AuditType() string    { return AuditBreakerChanged }
func (b BreakerChanged) AuditActor() string { return b.Actor }

func (ScheduleChanged) AuditType() string    { return AuditScheduleChanged }
func (c ScheduleChanged) AuditActor() string { return c.Actor }

func (TenantChanged) AuditType() string    { return AuditTenantChanged }
func (c TenantChanged) AuditActor() string { return c.Actor }

// auditTypes maps each Audited record's CloudEvents type to its audit type.
var auditTypes = map[string]string{
	CETypeBreakerChanged:  AuditBreakerChanged,
	CETypeScheduleChanged: AuditScheduleChanged,
	CETypeTenantChanged:   AuditTenantChanged,
}

// AuditTypeOf returns the audit type named s, given as the audit type
// (schedule.changed) or the CloudEvents type (ferry.schedule.changed.v1);
// false when s names no Audited record.
func AuditTypeOf(s string) (string, bool) {
	if t, ok := auditTypes[s]; ok {
		return t, true
	}
	for _, t := range auditTypes {
		if t == s {
			return t, true
		}
	}
	return "", false
}

// AuditTypes lists the audit types of the Audited records, sorted.
func AuditTypes() []string {
	out := slices.Collect(maps.Values(auditTypes))
	slices.Sort(out)
	return out
}
