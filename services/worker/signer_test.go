package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/signing"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/worker"
)

// withPostgres gives the bench's deps a fresh database, as worker.Needs
// asks: Build reads the tenants' http signing secrets from it.
func withPostgres(t *testing.T, b *bench) {
	t.Helper()
	b.deps.Postgres = testenv.Deps(t, service.Needs{Postgres: true}).Postgres
}

func loader(env map[string]string) *config.Loader {
	return config.NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func TestBuildNeedsPostgres(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	_, err := worker.Build(context.Background(), b.deps, loader(map[string]string{"FERRY_DATA_DIR": t.TempDir()}))
	if err == nil || !strings.Contains(err.Error(), "needs Postgres") {
		t.Fatalf("Build without Postgres: %v", err)
	}
}

// A worker started with another FERRY_SECRET_KEY than the one that sealed
// the stored secrets refuses to start instead of failing every http job.
func TestBuildRefusesAWrongSecretKey(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	withPostgres(t, b)
	ctx := context.Background()
	testenv.Tenant(t, b.deps.Postgres, "t1")
	key := func() string {
		k := make([]byte, secretbox.KeySize)
		_, _ = rand.Read(k)
		return base64.StdEncoding.EncodeToString(k)
	}
	k1, k2 := key(), key()
	raw, _ := secretbox.ParseKey(k1)
	box, _ := secretbox.New(raw)
	if err := signing.Migrate(ctx, b.deps.Postgres); err != nil {
		t.Fatal(err)
	}
	if _, _, err := signing.NewSecrets(b.deps.Postgres, box).Rotate(ctx, "t1", time.Hour, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Build(ctx, b.deps, loader(map[string]string{"FERRY_SECRET_KEY": k1})); err != nil {
		t.Fatalf("Build with the right key: %v", err)
	}
	_, err := worker.Build(ctx, b.deps, loader(map[string]string{"FERRY_SECRET_KEY": k2}))
	if err == nil || !strings.Contains(err.Error(), "FERRY_SECRET_KEY does not decrypt") {
		t.Fatalf("Build with another key: %v", err)
	}
	if _, err := worker.Build(ctx, b.deps, loader(map[string]string{"FERRY_SECRET_KEY": "short"})); err == nil {
		t.Fatal("Build accepted a malformed FERRY_SECRET_KEY")
	}
}
