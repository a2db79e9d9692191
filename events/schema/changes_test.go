package schema

import (
	"encoding/json"
	"testing"
)

func TestChanges(t *testing.T) {
	type settings struct {
		Name  string          `json:"name"`
		Limit int             `json:"limit"`
		Job   json.RawMessage `json:"job"`
		Extra *int            `json:"extra,omitempty"`
	}
	before := settings{Name: "a", Limit: 1, Job: json.RawMessage(`{"type":"noop"}`)}
	after := before
	after.Limit, after.Extra = 2, new(7)
	text := func(cs []FieldChange) string { b, _ := json.Marshal(cs); return string(b) }
	for _, c := range []struct {
		name          string
		before, after any
		want          string
	}{
		{"changed and added fields, in field order", before, after,
			`[{"field":"extra","from":null,"to":7},{"field":"limit","from":1,"to":2}]`},
		{"nothing changed", before, before, `null`},
		{"created", nil, before, `[{"field":"job","from":null,"to":{"type":"noop"}},{"field":"limit","from":null,"to":1},{"field":"name","from":null,"to":"a"}]`},
		{"deleted", &before, (*settings)(nil), `[{"field":"job","from":{"type":"noop"},"to":null},{"field":"limit","from":1,"to":null},{"field":"name","from":"a","to":null}]`},
	} {
		got, err := Changes(c.before, c.after)
		if err != nil || text(got) != c.want {
			t.Errorf("%s: %s %v, want %s", c.name, text(got), err, c.want)
		}
	}
	if _, err := Changes(3, before); err == nil {
		t.Error("a number compared as an object")
	}
}

func TestAuditTypeOf(t *testing.T) {
	for in, want := range map[string]string{
		"schedule.changed": AuditScheduleChanged, CETypeScheduleChanged: AuditScheduleChanged,
		"tenant.changed": AuditTenantChanged, CETypeTenantChanged: AuditTenantChanged,
		"breaker.changed": AuditBreakerChanged, CETypeBreakerChanged: AuditBreakerChanged,
	} {
		if got, ok := AuditTypeOf(in); !ok || got != want {
			t.Errorf("AuditTypeOf(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "completed", "ferry.job.completed.v1", "schedule"} {
		if got, ok := AuditTypeOf(in); ok {
			t.Errorf("AuditTypeOf(%q) = %q, want none", in, got)
		}
	}
	// Every Audited record type decodes to data that says its audit type.
	for _, rt := range recordTypes() {
		a, ok := rt.example.(Audited)
		if want, listed := auditTypes[rt.ceType]; ok != listed || ok && a.AuditType() != want {
			t.Errorf("%s: Audited %v, listed %v (%q)", rt.ceType, ok, listed, want)
		}
	}
}
