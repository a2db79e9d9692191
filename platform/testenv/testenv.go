// Package testenv gives tests in every Ferry module the real infrastructure
// they run against: a fresh PostgreSQL database, a private Redis database and
// an embedded Kafka broker per test.
//
// PostgreSQL and Redis are servers that `make test` (scripts/test.sh) starts
// once per run and announces through FERRY_TEST_POSTGRES_URL and
// FERRY_TEST_REDIS_URL. When a variable is missing, the helpers fail the test
// with instructions rather than skip it: a suite that silently skips its
// integration tests passes while testing nothing.
//
// Kafka needs no server: [Kafka] starts an in-process kfake broker.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// Environment variables read by the helpers.
const (
	// PostgresURLEnv names a superuser URL of a running PostgreSQL server.
	PostgresURLEnv = "FERRY_TEST_POSTGRES_URL"
	// RedisURLEnv names the URL of a running Redis server started with
	// enough databases for one per test (make test uses --databases 4096).
	RedisURLEnv = "FERRY_TEST_REDIS_URL"
)

// howToRun is appended to the failure when a variable is missing.
const howToRun = "run the tests with `make test`, which starts throw-away PostgreSQL and Redis servers " +
	"and sets " + PostgresURLEnv + " and " + RedisURLEnv + "; or start your own servers and set " +
	PostgresURLEnv + " (a superuser URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) and " +
	RedisURLEnv + " (e.g. redis://127.0.0.1:6379/0, server started with --databases 4096); " +
	"narrow a run with `TEST_RUN=regex MODULES=platform make test`"

// requireEnv returns the variable's value or fails t with instructions.
func requireEnv(t testing.TB, name string) string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		t.Fatalf("testenv: %s is not set: %s", name, howToRun)
	}
	return v
}

// randomSuffix returns n random hex characters.
func randomSuffix(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
