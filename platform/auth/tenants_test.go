package auth_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/testenv"
)

// openAuthDB opens a fresh database with the auth schema, closed at the
// end of the test.
func openAuthDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := testenv.Pool(t, 4)
	if err := auth.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// TestTenantsAndKeys: a created tenant's key resolves to it with its key
// id; revocation and disabling are seen once the cache entry expires.
func TestTenantsAndKeys(t *testing.T) {
	ctx := context.Background()
	pool := openAuthDB(t)
	tn, key, plain, err := auth.CreateTenant(ctx, pool, auth.Tenant{ID: "acme", Name: "Acme",
		Settings: auth.Settings{RateLimit: &auth.RateLimit{PerSecond: 5, Burst: 10}, MaxQueued: 7}})
	if err != nil {
		t.Fatal(err)
	}
	if tn.Weight != 1 || tn.Settings.MaxQueued != 7 || key.TenantID != "acme" || plain[:8] != key.Prefix {
		t.Fatalf("created %+v %+v", tn, key)
	}
	if _, _, _, err := auth.CreateTenant(ctx, pool, auth.Tenant{ID: "acme", Name: "again"}); !errors.Is(err, auth.ErrTenantExists) {
		t.Fatalf("duplicate: %v", err)
	}
	ks := auth.NewKeyStore(pool, 200*time.Millisecond)
	p, err := ks.Resolve(ctx, plain)
	if err != nil || p.TenantID != "acme" || p.KeyID != key.ID {
		t.Fatalf("resolve: %+v %v", p, err)
	}
	if _, err := auth.RevokeKey(ctx, pool, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Resolve(ctx, plain); err != nil {
		t.Fatalf("cached entry should still answer: %v", err)
	}
	time.Sleep(250 * time.Millisecond)
	if _, err := ks.Resolve(ctx, plain); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("revoked key: %v", err)
	}
	k2, plain2, err := auth.CreateKey(ctx, pool, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := auth.CreateKey(ctx, pool, "nope"); !errors.Is(err, auth.ErrTenantNotFound) {
		t.Fatalf("key for missing tenant: %v", err)
	}
	if p, err := ks.Resolve(ctx, plain2); err != nil || p.KeyID != k2.ID {
		t.Fatalf("second key: %+v %v", p, err)
	}
	yes := true
	u, err := auth.UpdateTenant(ctx, pool, "acme", auth.TenantUpdate{Disabled: &yes})
	if err != nil || u.DisabledAt == nil || u.Settings.MaxQueued != 7 {
		t.Fatalf("disable: %+v %v", u, err)
	}
	time.Sleep(250 * time.Millisecond)
	if _, err := ks.Resolve(ctx, plain2); !errors.Is(err, auth.ErrUnknownKey) {
		t.Fatalf("disabled tenant's key: %v", err)
	}
	keys, err := auth.ListKeys(ctx, pool, "acme")
	if err != nil || len(keys) != 2 || keys[0].ID != k2.ID || keys[1].RevokedAt == nil {
		t.Fatalf("keys: %+v %v", keys, err)
	}
	tc := auth.NewTenantCache(pool, time.Second)
	if got, found, err := tc.Get(ctx, "acme"); err != nil || !found || got.Settings.RateLimit.Burst != 10 {
		t.Fatalf("cache: %+v %v %v", got, found, err)
	}
	if _, found, err := tc.Get(ctx, "nope"); err != nil || found {
		t.Fatalf("missing tenant: %v %v", found, err)
	}
}

// TestListDispatchSettings: the scheduler's view of every tenant — weight,
// max_running and flow control — comes from the settings the admin routes
// write; a tenant whose stored flow_control cannot be read keeps its weight
// and max_running, is reported, and does not hide the other tenants.
func TestListDispatchSettings(t *testing.T) {
	ctx := context.Background()
	pool := openAuthDB(t)
	fc := &auth.FlowControl{
		RateLimits: map[string]auth.RateLimit{"email.send": {PerSecond: 2, Burst: 4}},
		Breakers:   map[string]auth.Breaker{"*": {Failures: 5, Window: schema.Duration(time.Minute), Cooldown: schema.Duration(30 * time.Second)}},
	}
	for _, tn := range []auth.Tenant{
		{ID: "acme", Name: "Acme", Weight: 3, Settings: auth.Settings{MaxRunning: 7, FlowControl: fc}},
		{ID: "globex", Name: "Globex"},
		{ID: "broken", Name: "Broken", Weight: 2, Settings: auth.Settings{MaxRunning: 1}},
	} {
		if _, _, _, err := auth.CreateTenant(ctx, pool, tn); err != nil {
			t.Fatal(err)
		}
	}
	// Written behind the admin routes' back: a breaker window that is no duration.
	if _, err := pool.Exec(ctx, `UPDATE tenants SET settings = settings || '{"flow_control": {"breakers": {"*": {"failures": 1, "window": "soon"}}}}' WHERE id = 'broken'`); err != nil {
		t.Fatal(err)
	}
	all, err := auth.ListDispatchSettings(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]auth.DispatchSettings{}
	for _, d := range all {
		got[d.TenantID] = d
	}
	if a := got["acme"]; a.Weight != 3 || a.MaxRunning != 7 || a.FlowControlErr != nil || !reflect.DeepEqual(a.FlowControl, fc) {
		t.Errorf("acme: %+v", a)
	}
	if g := got["globex"]; g.Weight != 1 || g.MaxRunning != 0 || g.FlowControl != nil || g.FlowControlErr != nil {
		t.Errorf("globex: %+v", g)
	}
	if b := got["broken"]; b.Weight != 2 || b.MaxRunning != 1 || b.FlowControl != nil || b.FlowControlErr == nil {
		t.Errorf("broken: %+v, want its weight and max_running with the flow_control error", b)
	}
	if len(all) != 3 {
		t.Errorf("%d tenants, want 3", len(all))
	}
}
