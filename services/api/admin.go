package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
)

// Tenant is the tenant resource of the admin routes.
type Tenant struct {
	ID              string          `json:"id"`
	Name            string          `json:"name"`
	Weight          int             `json:"weight"`
	RateLimit       *auth.RateLimit `json:"rate_limit"`
	MaxQueued       int             `json:"max_queued"`
	MaxRunning      int             `json:"max_running"`
	MaxPayloadBytes int             `json:"max_payload_bytes"`
	// MaxQueues and MaxWebhookEndpoints are 0 when the service defaults apply.
	MaxQueues           int `json:"max_queues"`
	MaxWebhookEndpoints int `json:"max_webhook_endpoints"`
	// FlowControl is null when the tenant has no dispatch rate limits nor
	// circuit breakers (flowcontrol.go).
	FlowControl *auth.FlowControl `json:"flow_control"`
	Disabled    bool              `json:"disabled"`
	DisabledAt  *time.Time        `json:"disabled_at"`
	CreatedAt   time.Time         `json:"created_at"`
}

// APIKey is an API key's metadata; Key (the plain key) is set only in the
// answer that creates it.
type APIKey struct {
	ID        string     `json:"id"`
	TenantID  string     `json:"tenant_id"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
	Key       string     `json:"api_key,omitempty"`
}

func tenantResource(t auth.Tenant) Tenant {
	return Tenant{
		ID: t.ID, Name: t.Name, Weight: t.Weight, RateLimit: t.Settings.RateLimit,
		MaxQueued: t.Settings.MaxQueued, MaxRunning: t.Settings.MaxRunning, MaxPayloadBytes: t.Settings.MaxPayloadBytes,
		MaxQueues: t.Settings.MaxQueues, MaxWebhookEndpoints: t.Settings.MaxWebhookEndpoints,
		FlowControl: t.Settings.FlowControl,
		Disabled:    t.DisabledAt != nil, DisabledAt: t.DisabledAt, CreatedAt: t.CreatedAt,
	}
}

func keyResource(k auth.Key) APIKey {
	return APIKey{ID: k.ID, TenantID: k.TenantID, Prefix: k.Prefix, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}

// tenantRequest is the body of POST and PATCH /v1/admin/tenants: absent
// fields are left as they are (PATCH) or default (POST); 0 clears a
// tenant-specific limit (the service's default applies where it has one)
// and rate_limit null removes the rate limit.
type tenantRequest struct {
	ID                  *string        `json:"id"`
	Name                *string        `json:"name"`
	Weight              *int           `json:"weight"`
	RateLimit           optRateLimit   `json:"rate_limit"`
	MaxQueued           *int           `json:"max_queued"`
	MaxRunning          *int           `json:"max_running"`
	MaxPayloadBytes     *int           `json:"max_payload_bytes"`
	MaxQueues           *int           `json:"max_queues"`
	MaxWebhookEndpoints *int           `json:"max_webhook_endpoints"`
	FlowControl         optFlowControl `json:"flow_control"`
	Disabled            *bool          `json:"disabled"`
}

// optRateLimit tells an absent rate_limit from an explicit null.
type optRateLimit struct {
	Set   bool
	Value *auth.RateLimit
}

func (o *optRateLimit) UnmarshalJSON(b []byte) error {
	o.Set = true
	if string(b) == "null" {
		return nil
	}
	var rl auth.RateLimit
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rl); err != nil {
		return fmt.Errorf("rate_limit must be null or {\"per_second\": number, \"burst\": integer}: %w", err)
	}
	o.Value = &rl
	return nil
}

var tenantIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Upper bounds of tenant settings.
const (
	maxWeight    = 1000
	maxRateLimit = 1_000_000
	// maxQueuesLimit: the scheduler visits every live queue of an active
	// tenant on each dispatch step.
	maxQueuesLimit           = 10_000
	maxWebhookEndpointsLimit = 10_000
)

// apply validates r and folds it into settings, collecting field errors.
func (r tenantRequest) apply(st *auth.Settings, maxPayload int, bad map[string]string) {
	nonNeg := func(name string, v *int, dst *int, hi int) {
		if v == nil {
			return
		}
		if *v < 0 || *v > hi {
			bad[name] = fmt.Sprintf("must be between 0 (the default) and %d", hi)
			return
		}
		*dst = *v
	}
	if r.Weight != nil && (*r.Weight < 1 || *r.Weight > maxWeight) {
		bad["weight"] = fmt.Sprintf("must be between 1 and %d", maxWeight)
	}
	if r.RateLimit.Set {
		st.RateLimit = nil
		if rl := r.RateLimit.Value; rl != nil {
			switch {
			case rl.PerSecond <= 0 || rl.PerSecond > maxRateLimit:
				bad["rate_limit.per_second"] = fmt.Sprintf("must be above 0 and at most %d jobs per second", maxRateLimit)
			case rl.Burst < 1 || rl.Burst > maxRateLimit:
				bad["rate_limit.burst"] = fmt.Sprintf("must be between 1 and %d jobs", maxRateLimit)
			default:
				v := *rl
				st.RateLimit = &v
			}
		}
	}
	nonNeg("max_queued", r.MaxQueued, &st.MaxQueued, 1<<31-1)
	nonNeg("max_queues", r.MaxQueues, &st.MaxQueues, maxQueuesLimit)
	nonNeg("max_webhook_endpoints", r.MaxWebhookEndpoints, &st.MaxWebhookEndpoints, maxWebhookEndpointsLimit)
	nonNeg("max_running", r.MaxRunning, &st.MaxRunning, 1<<31-1)
	nonNeg("max_payload_bytes", r.MaxPayloadBytes, &st.MaxPayloadBytes, maxPayload)
	r.FlowControl.apply(st, bad)
}

// maxTenantPayload bounds a tenant's max_payload_bytes: a payload must fit
// in a Kafka record with room to spare.
const maxTenantPayload = 8 << 20

func invalid(bad map[string]string) *httpx.Error {
	e := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "the tenant has invalid fields")
	e.Fields = bad
	return e
}

func (s *Service) handleCreateTenant(w http.ResponseWriter, r *http.Request) {
	var req tenantRequest
	if err := httpx.DecodeJSON(w, r, 64<<10, &req); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	bad := map[string]string{}
	t := auth.Tenant{Weight: 1}
	switch {
	case req.ID == nil:
		t.ID = auth.NewTenantID()
	case !tenantIDPattern.MatchString(*req.ID):
		bad["id"] = "must hold 1 to 63 lower-case letters, digits, '_' or '-', starting with a letter or digit"
	default:
		t.ID = *req.ID
	}
	switch {
	case req.Name == nil || *req.Name == "" || len(*req.Name) > 200:
		bad["name"] = "is required (at most 200 characters)"
	case schema.CheckText(*req.Name) != nil:
		bad["name"] = schema.FieldMessage(schema.CheckText(*req.Name))
	default:
		t.Name = *req.Name
	}
	if req.Disabled != nil {
		bad["disabled"] = "cannot be set on creation; PATCH the tenant"
	}
	req.apply(&t.Settings, maxTenantPayload, bad)
	if req.Weight != nil {
		t.Weight = *req.Weight
	}
	if len(bad) > 0 {
		httpx.WriteError(w, r, invalid(bad))
		return
	}
	created, key, plain, err := auth.CreateTenant(r.Context(), s.deps.Postgres, t)
	if errors.Is(err, auth.ErrTenantExists) {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusConflict, "tenant_exists", "tenant %q already exists", t.ID))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "tenant created", "tenant", created.ID, "key_id", key.ID)
	// Recorded once it exists (a record before the insert would record the
	// creations refused as tenant_exists too); if Kafka fails now, the log
	// line above is all that tells of it.
	if err := s.recordTenant(r.Context(), schema.ActionCreated, nil, created); err != nil {
		s.log.ErrorContext(r.Context(), "tenant created but not recorded for the audit log", "tenant", created.ID)
	}
	httpx.WriteJSON(w, http.StatusCreated, struct {
		Tenant
		APIKey string `json:"api_key"`
		KeyID  string `json:"key_id"`
	}{tenantResource(created), plain, key.ID})
}

// Tenant list limits.
const (
	defaultTenantLimit = 100
	maxTenantLimit     = 500
)

func (s *Service) handleListTenants(w http.ResponseWriter, r *http.Request) {
	writeIDPage(w, r, "tenants", defaultTenantLimit, maxTenantLimit,
		func(after string, limit int) ([]auth.Tenant, error) {
			return auth.ListTenants(r.Context(), s.deps.Postgres, after, limit)
		},
		func(t auth.Tenant) string { return t.ID }, tenantResource)
}

func (s *Service) handleGetTenant(w http.ResponseWriter, r *http.Request) {
	t, err := auth.GetTenant(r.Context(), s.deps.Postgres, chi.URLParam(r, "id"))
	if errors.Is(err, auth.ErrTenantNotFound) {
		httpx.WriteError(w, r, httpx.ErrNotFound)
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, tenantResource(t))
}

func (s *Service) handleUpdateTenant(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := chi.URLParam(r, "id")
	var req tenantRequest
	if err := httpx.DecodeJSON(w, r, 64<<10, &req); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	cur, err := auth.GetTenant(ctx, s.deps.Postgres, id)
	if errors.Is(err, auth.ErrTenantNotFound) {
		httpx.WriteError(w, r, httpx.ErrNotFound)
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	bad := map[string]string{}
	if req.ID != nil && *req.ID != id {
		bad["id"] = "cannot be changed"
	}
	if req.Name != nil {
		if err := schema.CheckText(*req.Name); err != nil {
			bad["name"] = schema.FieldMessage(err)
		} else if *req.Name == "" || len(*req.Name) > 200 {
			bad["name"] = "must hold 1 to 200 characters"
		}
	}
	settings := cur.Settings
	req.apply(&settings, maxTenantPayload, bad)
	if len(bad) > 0 {
		httpx.WriteError(w, r, invalid(bad))
		return
	}
	// Settings are rewritten whole from the row just read; two admins
	// patching different limits of one tenant at once is not a case
	// worth a version column.
	upd := auth.TenantUpdate{Name: req.Name, Weight: req.Weight, Settings: &settings, Disabled: req.Disabled}
	if err := s.recordTenantChange(ctx, cur, upd); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	t, err := auth.UpdateTenant(ctx, s.deps.Postgres, id, upd)
	if errors.Is(err, auth.ErrTenantNotFound) {
		httpx.WriteError(w, r, httpx.ErrNotFound)
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.InfoContext(ctx, "tenant updated", "tenant", t.ID, "disabled", t.DisabledAt != nil)
	httpx.WriteJSON(w, http.StatusOK, tenantResource(t))
}

func (s *Service) handleCreateKey(w http.ResponseWriter, r *http.Request) {
	key, plain, err := auth.CreateKey(r.Context(), s.deps.Postgres, chi.URLParam(r, "id"))
	if errors.Is(err, auth.ErrTenantNotFound) {
		httpx.WriteError(w, r, httpx.ErrNotFound)
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "api key issued", "tenant", key.TenantID, "key_id", key.ID)
	res := keyResource(key)
	res.Key = plain
	httpx.WriteJSON(w, http.StatusCreated, res)
}

func (s *Service) handleListKeys(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := chi.URLParam(r, "id")
	if _, err := auth.GetTenant(ctx, s.deps.Postgres, id); err != nil {
		if errors.Is(err, auth.ErrTenantNotFound) {
			err = httpx.ErrNotFound
		}
		httpx.WriteError(w, r, err)
		return
	}
	ks, err := auth.ListKeys(ctx, s.deps.Postgres, id)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := make([]APIKey, 0, len(ks))
	for _, k := range ks {
		out = append(out, keyResource(k))
	}
	// One page: a tenant holds few keys.
	httpx.WriteList(w, "keys", out, "")
}

func (s *Service) handleRevokeKey(w http.ResponseWriter, r *http.Request) {
	k, err := auth.RevokeKey(r.Context(), s.deps.Postgres, chi.URLParam(r, "key_id"))
	if errors.Is(err, auth.ErrKeyNotFound) {
		httpx.WriteError(w, r, httpx.ErrNotFound)
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "api key revoked", "tenant", k.TenantID, "key_id", k.ID)
	w.WriteHeader(http.StatusNoContent)
}
