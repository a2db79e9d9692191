package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferryhq/ferry/platform/callback"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/signing"
	"github.com/ferryhq/ferry/services/worker/handlers"
)

// handlerOptions opens what the built-in handlers need of the deployment:
// the store the http handler reads its tenants' signing secrets from at
// request time, the issuer of async http jobs' callback tokens, and the
// outbound allowlist (FERRY_OUTBOUND_ALLOW, which every service shares
// through deps.Common). It applies the migrations of those stores with ctx,
// the one place a worker touches the schema. It
// refuses to start without Postgres or with a key that does not open the
// stored secrets: either would make every http job of a tenant with a
// secret fail.
func handlerOptions(ctx context.Context, deps *service.Deps, cfg Config) (handlers.Options, error) {
	if err := cfg.Validate(); err != nil {
		return handlers.Options{}, fmt.Errorf("worker: %w", err)
	}
	if deps == nil || deps.Postgres == nil {
		return handlers.Options{}, errors.New("worker: needs Postgres (FERRY_POSTGRES_URL) to read the tenants' http signing secrets; start it with worker.Needs")
	}
	box, fromFile, created, err := secretbox.FromKeyOrFile(cfg.SecretKey, cfg.SecretKeyFile)
	if err != nil {
		return handlers.Options{}, fmt.Errorf("worker: %w", err)
	}
	if fromFile {
		deps.Log("worker").Warn("worker: FERRY_SECRET_KEY is not set; using a key file (fine for development, set FERRY_SECRET_KEY in production, the same as the api's)",
			"file", cfg.SecretKeyFile, "created", created)
	}
	if err := signing.Migrate(ctx, deps.Postgres); err != nil {
		return handlers.Options{}, fmt.Errorf("worker: %w", err)
	}
	if err := callback.Migrate(ctx, deps.Postgres); err != nil {
		return handlers.Options{}, fmt.Errorf("worker: %w", err)
	}
	s := signing.NewSecrets(deps.Postgres, box)
	if err := s.Check(ctx); err != nil {
		return handlers.Options{}, fmt.Errorf("worker: %w", err)
	}
	return handlers.Options{
		Allow:  deps.Common.OutboundAllow,
		Signer: s,
		Callbacks: &callback.Issuer{Box: box, Attempts: callback.NewAttempts(deps.Postgres),
			BaseURL: cfg.CallbackURL, TTL: cfg.CallbackTokenTTL},
		AsyncLease: cfg.AsyncLease,
	}, nil
}
