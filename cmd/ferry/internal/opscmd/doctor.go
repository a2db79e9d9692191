package opscmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/redisx"
)

// MaxClockSkew is the largest difference between this machine's clock and
// Postgres's that `ferry doctor` accepts: leases, delays and retention
// compare times written by different machines.
const MaxClockSkew = time.Second

// DoctorTimeout bounds each check.
var DoctorTimeout = 15 * time.Second

const doctorUsage = `Usage: ferry doctor

Checks, with the same environment a Ferry service gets, that this machine
reaches and authenticates to Kafka, Postgres and Redis, that Ferry's topics
keep acknowledged records through one broker failure, that every schema
migration is applied, that its clock agrees with Postgres's, and that Redis
never evicts (with the settings docs/operations.md recommends listed). Prints
OK or FAIL per check with what to do; exits 1 if any check failed.
`

// check is one line of the doctor's report.
type check struct {
	name string
	run  func(ctx context.Context) (detail string, err error)
}

// Doctor runs `ferry doctor` and returns the exit code.
func Doctor(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprint(stdout, doctorUsage)
		if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
			return exitOK
		}
		return exitUsage
	}
	l := config.NewLoader(lookup)
	c := config.LoadCommon(l)
	if err := errors.Join(l.Err(), c.Validate()); err != nil {
		fmt.Fprintf(stdout, "FAIL configuration: %v\n", err)
		return exitFail
	}
	fmt.Fprintln(stdout, "OK   configuration")
	failed := 0
	for _, ch := range doctorChecks(c) {
		cctx, cancel := context.WithTimeout(ctx, DoctorTimeout)
		detail, err := ch.run(cctx)
		cancel()
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL %s: %v\n", ch.name, err)
			continue
		}
		fmt.Fprintf(stdout, "OK   %s%s\n", ch.name, prefixed(detail))
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%d check(s) failed\n", failed)
		return exitFail
	}
	return exitOK
}

func prefixed(detail string) string {
	if detail == "" {
		return ""
	}
	return ": " + detail
}

// doctorChecks are the checks in the order they run; a Postgres check opens
// its own connection, so one failure does not hide the others.
func doctorChecks(c config.Common) []check {
	return []check{
		{"kafka connection", func(ctx context.Context) (string, error) { return checkKafka(ctx, c, false) }},
		{"kafka topics", func(ctx context.Context) (string, error) { return checkKafka(ctx, c, true) }},
		{"postgres connection", func(ctx context.Context) (string, error) { return withPostgres(ctx, c, checkPostgres) }},
		{"postgres migrations", func(ctx context.Context) (string, error) { return withPostgres(ctx, c, checkMigrations) }},
		{"clock skew", func(ctx context.Context) (string, error) { return withPostgres(ctx, c, checkClock) }},
		{"redis connection", func(ctx context.Context) (string, error) { return checkRedis(ctx, c) }},
		{"redis settings", func(ctx context.Context) (string, error) { return checkRedisSettings(ctx, c) }},
	}
}

// checkKafka connects and authenticates as the services do; with topics,
// it also judges the durability of every Ferry topic.
func checkKafka(ctx context.Context, c config.Common, topics bool) (string, error) {
	cfg := kafkax.Config{Brokers: c.KafkaBrokers, ClientID: "ferry-doctor", Security: c.KafkaSecurity}
	cl, err := kafkax.NewClient(cfg)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	deadline, _ := ctx.Deadline()
	if err := kafkax.CheckConnection(ctx, cl, cfg, time.Until(deadline)); err != nil {
		return "", err
	}
	if !topics {
		return strings.Join(c.KafkaBrokers, ","), nil
	}
	names := schema.Topics{Prefix: c.TopicPrefix}.All()
	ds, err := kafkax.DescribeDurability(ctx, cl, names...)
	if err != nil {
		return "", fmt.Errorf("%w (a missing topic is created by the first service that starts)", err)
	}
	var risks []string
	for _, d := range ds {
		for _, r := range d.LossRisks() {
			risks = append(risks, d.Topic+": "+r)
		}
	}
	if len(risks) > 0 {
		return "", fmt.Errorf("a broker failure can lose acknowledged records:\n  %s", strings.Join(risks, "\n  "))
	}
	return fmt.Sprintf("%d topics keep acknowledged records through one broker failure", len(ds)), nil
}

// withPostgres runs f on a connection to FERRY_POSTGRES_URL.
func withPostgres(ctx context.Context, c config.Common, f func(context.Context, *pgxpool.Pool) (string, error)) (string, error) {
	if c.PostgresURL == "" {
		return "", errors.New("FERRY_POSTGRES_URL is not set")
	}
	pool, err := pgstore.Open(ctx, c.PostgresURL, 1)
	if err != nil {
		return "", fmt.Errorf("%w (check the host, port, user and password in FERRY_POSTGRES_URL; for TLS add sslmode=verify-full&sslrootcert=<ca.pem>)", err)
	}
	defer pool.Close()
	return f(ctx, pool)
}

// checkPostgres reports who the services will be and how they connect.
func checkPostgres(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var user, version string
	var ssl bool
	err := pool.QueryRow(ctx, `SELECT current_user, current_setting('server_version'),
		COALESCE((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)`).Scan(&user, &version, &ssl)
	if err != nil {
		return "", err
	}
	tls := "without TLS"
	if ssl {
		tls = "over TLS"
	}
	return fmt.Sprintf("as %s, Postgres %s, %s", user, version, tls), nil
}

// checkMigrations fails when a component's migration is not applied.
func checkMigrations(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var pending []string
	comps := pgstore.Registered()
	for _, c := range comps {
		p, err := c.Pending(ctx, pool)
		if err != nil {
			return "", err
		}
		if len(p) > 0 {
			pending = append(pending, c.Name+": "+strings.Join(p, ", "))
		}
	}
	if len(pending) > 0 {
		return "", fmt.Errorf(`not applied: %s; run "ferry migrate up" with the schema owner's FERRY_POSTGRES_URL `+
			`(services with FERRY_POSTGRES_MIGRATE=true apply them at start)`, strings.Join(pending, "; "))
	}
	return fmt.Sprintf("%d components current", len(comps)), nil
}

// checkClock compares this machine's clock with Postgres's now(), allowing
// for the round trip.
func checkClock(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	before := time.Now()
	var db time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		return "", err
	}
	after := time.Now()
	rtt := after.Sub(before)
	skew := db.Sub(before.Add(rtt / 2))
	if skew.Abs() > MaxClockSkew+rtt/2 {
		return "", fmt.Errorf("this machine's clock is %s off Postgres's (allowed %s): synchronise every machine with NTP (chrony, systemd-timesyncd)",
			skew.Round(time.Millisecond), MaxClockSkew)
	}
	return fmt.Sprintf("%s (round trip %s)", skew.Round(time.Millisecond), rtt.Round(time.Millisecond)), nil
}

// checkRedis connects as the services do (URL, ACL, TLS, Sentinel).
func checkRedis(ctx context.Context, c config.Common) (string, error) {
	cl, err := redisx.Connect(ctx, c.RedisURL, c.Redis)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	addr := cl.Options().Addr
	if c.Redis.Sentinel() {
		addr = "master " + c.Redis.SentinelMaster + " via Sentinel"
	}
	return addr, nil
}
