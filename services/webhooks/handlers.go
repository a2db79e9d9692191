package webhooks

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/outbound"
	"github.com/ferryhq/ferry/platform/signing"
	"github.com/ferryhq/ferry/services/webhooks/internal/store"
)

// Limits of a registration.
const (
	maxBodyBytes   = 64 << 10
	maxURLLen      = 2048
	maxDescription = 1024
	defaultLimit   = 50
	maxLimit       = 200
)

// Filter is the optional job filter of an endpoint.
type Filter struct {
	Queue string `json:"queue,omitempty"`
	Type  string `json:"type,omitempty"`
}

// CreateRequest is the body of POST /v1/webhooks.
type CreateRequest struct {
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	Filter      *Filter  `json:"filter,omitempty"`
	Description string   `json:"description,omitempty"`
}

// Endpoint is the webhook resource.
type Endpoint struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	Filter      Filter   `json:"filter"`
	Description string   `json:"description,omitempty"`
	// Status is active or disabled.
	Status         string     `json:"status"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	// Secret is only present in the answers of create and rotate-secret.
	Secret string `json:"secret,omitempty"`
	// PreviousSecretExpiresAt is when the rotated-out secret stops signing.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
}

func endpointJSON(e store.Endpoint, now time.Time) Endpoint {
	out := Endpoint{
		ID: e.ID, URL: e.URL, EventTypes: e.EventTypes, Filter: Filter{Queue: e.FilterQueue, Type: e.FilterType},
		Description: e.Description, Status: "active", CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
	}
	if out.EventTypes == nil {
		out.EventTypes = []string{}
	}
	if e.DisabledAt != nil {
		out.Status, out.DisabledAt, out.DisabledReason = "disabled", e.DisabledAt, e.DisabledReason
	}
	if e.PrevUntil != nil && e.PrevUntil.After(now) {
		out.PreviousSecretExpiresAt = e.PrevUntil
	}
	return out
}

func tenantOf(r *http.Request) string {
	p, _ := auth.FromContext(r.Context())
	return p.TenantID
}

func (s *Service) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req CreateRequest
	if err := httpx.DecodeJSON(w, r, maxBodyBytes, &req); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	e, herr := s.validate(r.Context(), req)
	if herr != nil {
		httpx.WriteError(w, r, herr)
		return
	}
	secret := signing.NewSecret()
	e.ID = "wh_" + strings.ReplaceAll(schema.NewEventID(), "-", "")
	e.TenantID = tenantOf(r)
	e.SecretEnc = s.box.Seal([]byte(secret), []byte(e.ID))
	created, limit, err := s.store.CreateEndpointLimited(r.Context(), e, s.cfg.MaxEndpoints)
	if errors.Is(err, store.ErrTooManyEndpoints) {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusConflict, "too_many_endpoints",
			"the tenant has %d webhook endpoints, its limit (max_webhook_endpoints); delete one first", limit))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.refresh(r.Context())
	out := endpointJSON(created, time.Now())
	out.Secret = secret
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusCreated, out)
}

// validate checks a registration and returns the endpoint to store.
func (s *Service) validate(ctx context.Context, req CreateRequest) (store.Endpoint, *httpx.Error) {
	fields := map[string]string{}
	e := store.Endpoint{URL: strings.TrimSpace(req.URL), Description: strings.TrimSpace(req.Description), EventTypes: []string{}}
	if req.Filter != nil {
		e.FilterQueue, e.FilterType = strings.TrimSpace(req.Filter.Queue), strings.TrimSpace(req.Filter.Type)
	}
	for _, t := range req.EventTypes {
		et := schema.EventType(strings.TrimSpace(t))
		if !et.Valid() {
			fields["event_types"] = "unknown event type " + strconv.Quote(t) + "; use enqueued, started, progress, completed, failed, dlq or cancelled"
			continue
		}
		if !slices.Contains(e.EventTypes, string(et)) {
			e.EventTypes = append(e.EventTypes, string(et))
		}
	}
	if len(e.Description) > maxDescription {
		fields["description"] = "at most " + strconv.Itoa(maxDescription) + " bytes"
	}
	// Every stored string must be storable text (schema.CheckText).
	for field, v := range map[string]string{"description": e.Description, "filter.queue": e.FilterQueue, "filter.type": e.FilterType, "url": e.URL} {
		if err := schema.CheckText(v); err != nil {
			fields[field] = schema.FieldMessage(err)
		}
	}
	u, uerr := parseURL(e.URL)
	if uerr != "" && fields["url"] == "" {
		fields["url"] = uerr
	}
	if len(fields) > 0 {
		err := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "invalid webhook registration")
		if _, ok := fields["url"]; ok && len(fields) == 1 {
			err.Code = "invalid_url"
			err.Message = "url: " + fields["url"]
		}
		err.Fields = fields
		return e, err
	}
	if herr := s.checkHost(ctx, u.Hostname()); herr != nil {
		return e, herr
	}
	e.URL = u.String()
	return e, nil
}

func parseURL(raw string) (*url.URL, string) {
	if raw == "" {
		return nil, "required"
	}
	if len(raw) > maxURLLen {
		return nil, "at most " + strconv.Itoa(maxURLLen) + " bytes"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "not a valid URL"
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, "scheme must be https or http"
	}
	if u.Hostname() == "" {
		return nil, "host is required"
	}
	if u.Fragment != "" {
		return nil, "must not have a fragment"
	}
	return u, ""
}

// checkHost refuses hosts that are, or resolve to, an address the SSRF
// guard refuses (loopback, private, link-local, …) unless allowlisted by
// FERRY_OUTBOUND_ALLOW. The outbound client checks again at every delivery,
// which also catches DNS answers that change later.
func (s *Service) checkHost(ctx context.Context, host string) *httpx.Error {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		addrs, err = net.DefaultResolver.LookupNetIP(rctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && !dnsErr.IsNotFound {
				return httpx.Errorf(http.StatusServiceUnavailable, "dns_unavailable", "could not resolve %s now; try again", host)
			}
			e := httpx.Errorf(http.StatusUnprocessableEntity, "invalid_url", "url: host %s does not resolve", host)
			e.Fields = map[string]string{"url": "host does not resolve"}
			return e
		}
	}
	for _, a := range addrs {
		if reason, blocked := outbound.Blocked(a, s.deps.Common.OutboundAllow); blocked {
			e := httpx.Errorf(http.StatusUnprocessableEntity, "url_not_allowed",
				"url: %s is a %s address; webhooks may only call public addresses unless an operator allowlists it (FERRY_OUTBOUND_ALLOW)", a.Unmap(), reason)
			e.Fields = map[string]string{"url": reason + " address not allowed"}
			return e
		}
	}
	return nil
}

func (s *Service) endpoint(w http.ResponseWriter, r *http.Request) (store.Endpoint, bool) {
	e, err := s.store.Endpoint(r.Context(), tenantOf(r), chi.URLParam(r, "id"))
	if errors.Is(err, store.ErrNotFound) {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusNotFound, "webhook_not_found", "no webhook %q", chi.URLParam(r, "id")))
		return e, false
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return e, false
	}
	return e, true
}

func (s *Service) handleGet(w http.ResponseWriter, r *http.Request) {
	if e, ok := s.endpoint(w, r); ok {
		httpx.WriteJSON(w, http.StatusOK, endpointJSON(e, time.Now()))
	}
}

// The endpoint list pages by httpx.Keyset; the delivery logs by deliveryCursor.
func (s *Service) handleList(w http.ResponseWriter, r *http.Request) {
	limit, err := httpx.ParseLimit(r, defaultLimit, maxLimit)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	after, err := httpx.KeysetParam(r)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	afterID := ""
	if after != nil {
		afterID = after.ID
	}
	eps, err := s.store.Endpoints(r.Context(), tenantOf(r), afterID, limit+1)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	eps, next := httpx.TrimPage(eps, limit, func(e store.Endpoint) string { return httpx.Keyset{ID: e.ID}.String() })
	out := make([]Endpoint, 0, len(eps))
	now := time.Now()
	for _, e := range eps {
		out = append(out, endpointJSON(e, now))
	}
	httpx.WriteList(w, "webhooks", out, next)
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request) {
	err := s.store.DeleteEndpoint(r.Context(), tenantOf(r), chi.URLParam(r, "id"))
	if errors.Is(err, store.ErrNotFound) {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusNotFound, "webhook_not_found", "no webhook %q", chi.URLParam(r, "id")))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.refresh(r.Context())
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) handleRotate(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.endpoint(w, r); !ok {
		return
	}
	id := chi.URLParam(r, "id")
	secret := signing.NewSecret()
	now := time.Now()
	e, err := s.store.RotateSecret(r.Context(), tenantOf(r), id, s.box.Seal([]byte(secret), []byte(id)), now.Add(s.cfg.SecretGrace))
	if errors.Is(err, store.ErrNotFound) {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusNotFound, "webhook_not_found", "no webhook %q", id))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := endpointJSON(e, now)
	out.Secret = secret
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, out)
}

func (s *Service) handleEnable(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	e, err := s.store.EnableEndpoint(r.Context(), tenantOf(r), id)
	if errors.Is(err, store.ErrNotFound) {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusNotFound, "webhook_not_found", "no webhook %q", id))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.refresh(r.Context())
	httpx.WriteJSON(w, http.StatusOK, endpointJSON(e, time.Now()))
}
