package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/signing"
)

// SigningSecret is the resource of a tenant's http signing secret: the key
// every request of its http jobs is signed with (Standard Webhooks).
type SigningSecret struct {
	CreatedAt time.Time `json:"created_at"`
	RotatedAt time.Time `json:"rotated_at"`
	// PreviousSecretExpiresAt is when the rotated-out secret stops signing.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
	// Secret is only present in the answer of rotate, once.
	Secret string `json:"secret,omitempty"`
}

// openSigning opens the store of the tenants' http signing secrets, sealed
// with FERRY_SECRET_KEY (or, in development, the key file every process of
// `ferry dev` shares). A Config built in code without any key leaves it
// unset: the routes then answer 503.
func (s *Service) openSigning(ctx context.Context) error {
	if len(s.cfg.SecretKey) == 0 && s.cfg.SecretKeyFile == "" {
		s.log.Warn("api: no FERRY_SECRET_KEY nor key file: the http signing secret routes answer 503")
		return nil
	}
	box, fromFile, created, err := secretbox.FromKeyOrFile(s.cfg.SecretKey, s.cfg.SecretKeyFile)
	if err != nil {
		return fmt.Errorf("api: %w", err)
	}
	if fromFile {
		s.log.Warn("api: FERRY_SECRET_KEY is not set; using a key file (fine for development, set FERRY_SECRET_KEY in production, the same as the workers')",
			"file", s.cfg.SecretKeyFile, "created", created)
	}
	sec := signing.NewSecrets(s.deps.Postgres, box)
	if err := sec.Check(ctx); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	s.signing = sec
	s.openCallbacks(box)
	return nil
}

func signingJSON(m signing.Meta) SigningSecret {
	return SigningSecret{CreatedAt: m.CreatedAt, RotatedAt: m.RotatedAt, PreviousSecretExpiresAt: m.PreviousExpiresAt}
}

func (s *Service) signingReady(w http.ResponseWriter, r *http.Request) bool {
	if s.signing == nil {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusServiceUnavailable, "signing_not_configured",
			"this api has no FERRY_SECRET_KEY: http signing secrets cannot be managed"))
		return false
	}
	return true
}

// handleRotateSigningSecret creates the tenant's first http signing secret
// (201) or replaces it (200), the replaced one signing beside it for
// FERRY_HTTP_SIGNING_SECRET_GRACE. The secret is in this answer only.
func (s *Service) handleRotateSigningSecret(w http.ResponseWriter, r *http.Request) {
	if !s.signingReady(w, r) {
		return
	}
	p, _ := auth.FromContext(r.Context())
	secret, m, err := s.signing.Rotate(r.Context(), p.TenantID, s.cfg.SigningSecretGrace, s.cfg.Now())
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	out := signingJSON(m)
	out.Secret = secret
	status := http.StatusOK
	if m.CreatedAt.Equal(m.RotatedAt) {
		status = http.StatusCreated
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, status, out)
}

// handleGetSigningSecret shows the metadata of the tenant's secret, never
// the secret.
func (s *Service) handleGetSigningSecret(w http.ResponseWriter, r *http.Request) {
	if !s.signingReady(w, r) {
		return
	}
	p, _ := auth.FromContext(r.Context())
	m, err := s.signing.Meta(r.Context(), p.TenantID, s.cfg.Now())
	if errors.Is(err, signing.ErrNoSecret) {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusNotFound, "signing_secret_not_found",
			"the tenant has no http signing secret yet: POST /v1/http-signing/secret/rotate creates it"))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, signingJSON(m))
}
