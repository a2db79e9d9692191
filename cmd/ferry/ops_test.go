package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferryhq/ferry/cmd/ferry/internal/opscmd"
	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
)

// lookupOf is an environment made of vars.
func lookupOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// ferryOps runs `ferry migrate|doctor args...` with vars as environment.
func ferryOps(t *testing.T, vars map[string]string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	var code int
	switch args[0] {
	case "migrate":
		code = opscmd.Migrate(ctx, args[1:], lookupOf(vars), &out, &errOut)
	case "doctor":
		code = opscmd.Doctor(ctx, args[1:], lookupOf(vars), &out, &errOut)
	}
	return code, out.String() + errOut.String()
}

// runtimeRole creates a login role with no privileges in ownerURL's
// database and returns the URL that connects as it; the role is dropped
// when the test ends.
func runtimeRole(t *testing.T, ownerURL string) (role, roleURL string) {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	rand.Read(b) //nolint:errcheck
	role, pass := "ferry_rt_"+hex.EncodeToString(b), hex.EncodeToString(b)+"-pw"
	conn, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE ROLE `+role+` LOGIN PASSWORD '`+pass+`'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, ownerURL)
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
			return
		}
		defer conn.Close(ctx)
		for _, s := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	})
	u, _ := url.Parse(ownerURL)
	u.User = url.UserPassword(role, pass)
	return role, u.String()
}

// TestMigrateAndLeastPrivilegeRole: `ferry migrate up` as the owner, then
// the whole stack runs as a role without DDL rights
// (FERRY_POSTGRES_MIGRATE=false): a job succeeds, while the role cannot
// change audit rows nor create tables.
// indexCount is the number of indexes of table in the database at url.
func indexCount(t *testing.T, url, table string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = $1`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMigrateAndLeastPrivilegeRole(t *testing.T) {
	owner := testenv.Postgres(t)
	vars := map[string]string{"FERRY_POSTGRES_URL": owner}
	if code, out := ferryOps(t, vars, "migrate", "status"); code != 1 || !strings.Contains(out, "pending: 0001_") {
		t.Fatalf("status of an empty database: exit %d, %s", code, out)
	}
	role, roleURL := runtimeRole(t, owner)

	// Before `ferry migrate up`, a service without DDL rights refuses to start.
	err := openAs(t, roleURL)
	if err == nil || !strings.Contains(err.Error(), "ferry migrate up") {
		t.Fatalf("start before migrate: err = %v, want one saying to run ferry migrate up", err)
	}

	if code, out := ferryOps(t, vars, "migrate", "up"); code != 0 || !strings.Contains(out, "audit") {
		t.Fatalf("migrate up: exit %d, %s", code, out)
	}
	if code, out := ferryOps(t, vars, "migrate", "status"); code != 0 || strings.Contains(out, "pending") {
		t.Fatalf("status after up: exit %d, %s", code, out)
	}
	// Components apply in order, so index migrations find their tables:
	// the indexes `ferry migrate up` leaves are the services' own.
	if n := indexCount(t, owner, "audit_events"); n != 3 {
		t.Fatalf("audit_events has %d indexes after migrate up, want 3", n)
	}
	if code, out := ferryOps(t, vars, "migrate", "grant", role); code != 0 {
		t.Fatalf("grant: exit %d, %s", code, out)
	}

	e := startStack(t, map[string]string{"FERRY_POSTGRES_URL": roleURL, "FERRY_POSTGRES_MIGRATE": "false"})
	id := e.submit(map[string]any{"type": "noop"})
	e.waitStatus(id, "succeeded", 30*time.Second)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, roleURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	waitFor(t, 30*time.Second, "the job's audit rows", func() bool {
		var n int
		return conn.QueryRow(ctx, `SELECT count(*) FROM audit_events WHERE job_id = $1`, id).Scan(&n) == nil && n > 0
	})
	for _, s := range []string{
		`UPDATE audit_events SET actor = 'forged' WHERE job_id = '` + id + `'`,
		`DELETE FROM audit_events WHERE job_id = '` + id + `'`,
		`UPDATE audit_events_default SET actor = 'forged'`,
		`TRUNCATE audit_events`,
		`CREATE TABLE ferry_sneaky (id int)`,
		`ALTER TABLE jobs ADD COLUMN sneaky int`,
	} {
		_, err := conn.Exec(ctx, s)
		var pgErr *pgconn.PgError
		// Privileges, not the audit triggers (which raise 42501 with
		// "append-only"), must refuse these.
		refused := errors.As(err, &pgErr) && pgErr.Code == "42501" &&
			(strings.Contains(pgErr.Message, "permission denied") || strings.Contains(pgErr.Message, "must be owner"))
		if !refused {
			t.Errorf("%s as the runtime role: err = %v, want permission denied (42501)", s, err)
		}
	}
}

// openAs opens the shared connections as a service with
// FERRY_POSTGRES_MIGRATE=false would.
func openAs(t *testing.T, pgURL string) error {
	l := config.NewLoader(lookupOf(map[string]string{"FERRY_POSTGRES_URL": pgURL, "FERRY_POSTGRES_MIGRATE": "false"}))
	c := config.LoadCommon(l)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	d, err := service.Open(context.Background(), c, nil, service.Needs{Postgres: true})
	if err == nil {
		d.Close()
	}
	return err
}

// TestDoctor: against a healthy deployment every check is OK; against one
// with unapplied migrations, a wrong Redis password and topics one broker
// failure would lose, each failure is named with what to do and the exit
// code is 1.
func TestDoctor(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ",")
	ensureTopics(t, brokers, 3, 2)
	pg := testenv.Postgres(t)
	vars := map[string]string{
		"FERRY_KAFKA_BROKERS": brokers, "FERRY_POSTGRES_URL": pg, "FERRY_REDIS_URL": testenv.Redis(t),
		"FERRY_TOPIC_PARTITIONS": "2",
	}
	if code, out := ferryOps(t, vars, "migrate", "up"); code != 0 {
		t.Fatalf("migrate up: %s", out)
	}
	code, out := ferryOps(t, vars, "doctor")
	if code != 0 || strings.Contains(out, "FAIL") {
		t.Fatalf("healthy deployment: exit %d\n%s", code, out)
	}
	for _, want := range []string{"OK   kafka connection", "OK   kafka topics", "OK   postgres connection", "OK   postgres migrations", "OK   clock skew", "OK   redis connection",
		"OK   redis settings: maxmemory-policy noeviction"} {
		if !strings.Contains(out, want) {
			t.Errorf("healthy deployment: no %q in\n%s", want, out)
		}
	}

	single := testenv.Kafka(t)
	ensureTopics(t, single, 1, 1)
	vars = map[string]string{
		"FERRY_KAFKA_BROKERS": single, "FERRY_POSTGRES_URL": testenv.Postgres(t),
		"FERRY_REDIS_URL": testenv.Redis(t), "FERRY_REDIS_USERNAME": "nobody", "FERRY_REDIS_PASSWORD": "not-it",
	}
	code, out = ferryOps(t, vars, "doctor")
	if code != 1 {
		t.Fatalf("broken deployment: exit %d, want 1\n%s", code, out)
	}
	for _, want := range []string{
		"OK   kafka connection", "FAIL kafka topics", "replication factor 1",
		"FAIL postgres migrations", "ferry migrate up", "OK   clock skew",
		"FAIL redis connection", "FERRY_REDIS_PASSWORD", "FAIL redis settings", "4 check(s) failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("broken deployment: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "not-it") {
		t.Errorf("the doctor printed the Redis password:\n%s", out)
	}
}

// ensureTopics creates Ferry's topics on brokers with the given replication.
func ensureTopics(t *testing.T, brokers string, replication int16, minInsync int) {
	t.Helper()
	cl, err := kafkax.NewClient(kafkax.Config{Brokers: strings.Split(brokers, ","), ClientID: "ops-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = kafkax.EnsureTopics(ctx, cl, kafkax.TopicSpec{Names: schema.Topics{Prefix: "ferry."}.All(), Partitions: 2,
		Retention: time.Hour, Replication: replication, MinInsync: minInsync})
	if err != nil {
		t.Fatal(err)
	}
}
