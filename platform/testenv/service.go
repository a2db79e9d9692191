package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/service"
)

// Common returns the settings of a service under test: a fresh database
// ([Postgres]), Redis database ([Redis]) and Kafka broker ([Kafka]) for what
// needs asks for, topic prefix "ferry.", 3 partitions per topic, 8 Postgres
// connections, migrations applied at open and a 5s shutdown timeout. Tests adjust the result before
// passing it to [Open].
func Common(t testing.TB, needs service.Needs) config.Common {
	t.Helper()
	c := config.Common{TopicPrefix: "ferry.", TopicPartitions: 3, PostgresMaxConns: 8, ShutdownTimeout: 5 * time.Second,
		PostgresMigrate: true}
	if needs.Kafka {
		c.KafkaBrokers = []string{Kafka(t)}
	}
	if needs.Postgres {
		c.PostgresURL = Postgres(t)
	}
	if needs.Redis {
		c.RedisURL = Redis(t)
	}
	return c
}

// Open opens the connections needs asks for over c, as a service's main
// does (service.Open: shared migrations, topics), with a logger that
// discards, and closes them when the test ends.
func Open(t testing.TB, c config.Common, needs service.Needs) *service.Deps {
	t.Helper()
	deps, err := service.Open(context.Background(), c, slog.New(slog.DiscardHandler), needs)
	if err != nil {
		t.Fatalf("testenv: open service connections: %v", err)
	}
	t.Cleanup(deps.Close)
	return deps
}

// Deps is Open over Common: the connections of a service under test with
// the default test settings.
func Deps(t testing.TB, needs service.Needs) *service.Deps {
	t.Helper()
	return Open(t, Common(t, needs), needs)
}

// Tenant creates the tenant id (named id) with an API key and returns the
// key, "fry_test_<id>_<test name>".
func Tenant(t testing.TB, pool *pgxpool.Pool, id string) (key string) {
	t.Helper()
	key = "fry_test_" + id + "_" + t.Name()
	if err := auth.EnsureTenant(context.Background(), pool, id, id, key); err != nil {
		t.Fatalf("testenv: tenant %s: %v", id, err)
	}
	return key
}

// Router returns comp's routes behind the router every service uses
// (httpx.NewRouter with the readiness checks of deps, no /metrics).
func Router(deps *service.Deps, comp service.Component) http.Handler {
	r := httpx.NewRouter(deps.Checks(), nil)
	comp.Routes(r)
	return r
}

// Serve serves [Router] on a real HTTP server of 127.0.0.1, closed when the
// test ends.
func Serve(t testing.TB, deps *service.Deps, comp service.Component) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(Router(deps, comp))
	t.Cleanup(srv.Close)
	return srv
}

// Run runs comp's background loops until stop is called or the test ends,
// whichever comes first. stop cancels the loops' context, waits for Run to
// return and fails the test if it returned an error; later calls do
// nothing.
func Run(t testing.TB, comp service.Component) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- comp.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Response is an answer of [Call].
type Response struct {
	Status int
	Header http.Header
	// Body is the answer decoded as a JSON object; nil when it is not one.
	Body map[string]any
	Raw  []byte
}

// ErrorCode returns the code of an error answer ({"error": {"code"}}), ""
// for any other answer.
func (r Response) ErrorCode() string {
	e, _ := r.Body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// Call sends method baseURL+path with key as its bearer token (none when
// key is ""), headers as name, value pairs, and body: nothing when nil, a
// string as it is, anything else as JSON. It fails the test when the
// request cannot be sent.
func Call(t testing.TB, baseURL, key, method, path string, body any, headers ...string) Response {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("testenv: request body: %v", err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, baseURL+path, rd)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("testenv: %s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("testenv: %s %s: read answer: %v", method, path, err)
	}
	r := Response{Status: res.StatusCode, Header: res.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.Body)
	return r
}
