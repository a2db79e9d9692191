package api_test

import (
	"testing"

	"github.com/ferryhq/ferry/services/api"
)

// TestTenantFlowControl: flow_control on a tenant is validated field by
// field, stored with the breakers' defaults filled, shown on the tenant, and
// removed with null.
func TestTenantFlowControl(t *testing.T) {
	b := setup(t, api.Config{})
	b.createTenant(t, `{"id":"flow","name":"Flow"}`)
	for body, field := range map[string]string{
		`{"flow_control":{"rate_limits":{"email.send":{"per_second":0,"burst":5}}}}`:      "flow_control.rate_limits.email.send.per_second",
		`{"flow_control":{"rate_limits":{"email.send":{"per_second":5,"burst":0}}}}`:      "flow_control.rate_limits.email.send.burst",
		`{"flow_control":{"rate_limits":{"bad type":{"per_second":5,"burst":5}}}}`:        "flow_control.rate_limits.bad type",
		`{"flow_control":{"breakers":{"*":{"window":"10ms"}}}}`:                           "flow_control.breakers.*.window",
		`{"flow_control":{"breakers":{"http":{"failures":-1}}}}`:                          "flow_control.breakers.http.failures",
		`{"flow_control":{"key_rate_limits":{"bad key":{"per_second":5,"burst":5}}}}`:     "flow_control.key_rate_limits.bad key",
		`{"flow_control":{"key_rate_limits":{"customer-42":{"per_second":5,"burst":0}}}}`: "flow_control.key_rate_limits.customer-42.burst",
	} {
		r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/flow", body)
		if r.Status != 422 || r.ErrorCode() != "validation_failed" || fieldsOf(r)[field] == nil {
			t.Errorf("%s: %d %s, want a field error on %s", body, r.Status, r.Raw, field)
		}
	}
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/flow", `{"flow_control":{"nope":1}}`); r.Status/100 != 4 {
		t.Errorf("unknown flow_control field: %d %s", r.Status, r.Raw)
	}
	r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/flow",
		`{"flow_control":{"rate_limits":{"email.send":{"per_second":0.5,"burst":2}},"breakers":{"*":{"failures":3}},
			"key_rate_limits":{"customer-42":{"per_second":2,"burst":1}}}}`)
	if r.Status != 200 {
		t.Fatalf("set flow control: %d %s", r.Status, r.Raw)
	}
	fc, _ := r.Body["flow_control"].(map[string]any)
	brk, _ := fc["breakers"].(map[string]any)["*"].(map[string]any)
	if fc["rate_limits"].(map[string]any)["email.send"].(map[string]any)["per_second"] != 0.5 ||
		brk["failures"] != 3.0 || brk["window"] != "1m0s" || brk["cooldown"] != "30s" ||
		fc["key_rate_limits"].(map[string]any)["customer-42"].(map[string]any)["per_second"] != 2.0 {
		t.Fatalf("flow control %v", fc)
	}
	if g := b.do(t, adminKey, "GET", "/v1/admin/tenants/flow", nil); g.Body["flow_control"] == nil {
		t.Errorf("GET tenant: %s", g.Raw)
	}
	// Other PATCHes leave it; null removes it.
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/flow", `{"weight":2}`); r.Body["flow_control"] == nil {
		t.Errorf("a weight PATCH dropped flow_control: %s", r.Raw)
	}
	if r := b.do(t, adminKey, "PATCH", "/v1/admin/tenants/flow", `{"flow_control":null}`); r.Status != 200 || r.Body["flow_control"] != nil {
		t.Errorf("remove flow control: %d %s", r.Status, r.Raw)
	}
}
