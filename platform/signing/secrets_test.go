package signing_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/signing"
	"github.com/ferryhq/ferry/platform/testenv"
)

func newSecrets(t *testing.T) (*signing.Secrets, *service.Deps) {
	t.Helper()
	deps := testenv.Deps(t, service.Needs{Postgres: true})
	if err := signing.Migrate(context.Background(), deps.Postgres); err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(bytes.Repeat([]byte{7}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Tenant(t, deps.Postgres, "t1")
	testenv.Tenant(t, deps.Postgres, "t2")
	return signing.NewSecrets(deps.Postgres, box), deps
}

func mustKey(t *testing.T, secret string) []byte {
	t.Helper()
	k, err := signing.Key(secret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSecretsRotateWithOverlap(t *testing.T) {
	s, _ := newSecrets(t)
	ctx := context.Background()
	t0 := time.Now().Truncate(time.Microsecond)
	if keys, err := s.Keys(ctx, "t1", t0); err != nil || len(keys) != 0 {
		t.Fatalf("keys before any secret: %v %v", keys, err)
	}
	if _, err := s.Meta(ctx, "t1", t0); !errors.Is(err, signing.ErrNoSecret) {
		t.Fatalf("meta before any secret: %v", err)
	}
	first, m, err := s.Rotate(ctx, "t1", time.Hour, t0)
	if err != nil || m.PreviousExpiresAt != nil || !m.CreatedAt.Equal(t0) {
		t.Fatalf("create: %+v %v", m, err)
	}
	keys, err := s.Keys(ctx, "t1", t0)
	if err != nil || len(keys) != 1 || !bytes.Equal(keys[0], mustKey(t, first)) {
		t.Fatalf("keys after create: %v", err)
	}
	t1 := t0.Add(time.Minute)
	second, m, err := s.Rotate(ctx, "t1", time.Hour, t1)
	if err != nil || second == first || m.PreviousExpiresAt == nil || !m.PreviousExpiresAt.Equal(t1.Add(time.Hour)) || !m.CreatedAt.Equal(t0) || !m.RotatedAt.Equal(t1) {
		t.Fatalf("rotate: %+v %v", m, err)
	}
	keys, _ = s.Keys(ctx, "t1", t1.Add(59*time.Minute))
	if len(keys) != 2 || !bytes.Equal(keys[0], mustKey(t, second)) || !bytes.Equal(keys[1], mustKey(t, first)) {
		t.Fatalf("during the grace: %d keys", len(keys))
	}
	if keys, _ = s.Keys(ctx, "t1", t1.Add(time.Hour)); len(keys) != 1 || !bytes.Equal(keys[0], mustKey(t, second)) {
		t.Fatalf("after the grace: %d keys", len(keys))
	}
	if m, _ := s.Meta(ctx, "t1", t1.Add(2*time.Hour)); m.PreviousExpiresAt != nil {
		t.Fatalf("meta after the grace shows a previous secret: %+v", m)
	}
	// Another tenant has its own secret, or none.
	if keys, _ := s.Keys(ctx, "t2", t1); len(keys) != 0 {
		t.Fatal("t2 got t1's keys")
	}
}

// A sealed secret is bound to its tenant: copied to another tenant's row it
// does not open; and Check refuses a key that does not open what is stored.
func TestSecretsBoundToTenantAndKey(t *testing.T) {
	s, deps := newSecrets(t)
	ctx := context.Background()
	if _, _, err := s.Rotate(ctx, "t1", 0, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := deps.Postgres.Exec(ctx, `INSERT INTO http_signing_secrets (tenant_id, secret_enc, created_at, rotated_at)
		SELECT 't2', secret_enc, created_at, rotated_at FROM http_signing_secrets WHERE tenant_id = 't1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Keys(ctx, "t2", time.Now()); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("t1's sealed secret opened for t2: %v", err)
	}
	if err := s.Check(ctx); err == nil {
		t.Fatal("Check passed over a secret that does not open")
	}
	other, _ := secretbox.New(bytes.Repeat([]byte{8}, secretbox.KeySize))
	if _, err := signing.NewSecrets(deps.Postgres, other).Keys(ctx, "t1", time.Now()); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("another key opened the secret: %v", err)
	}
}
