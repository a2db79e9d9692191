// Package devcmd implements `ferry dev`: every service in one process, with
// an embedded Kafka broker and local Postgres and Redis as child processes
// whose data lives under FERRY_DATA_DIR, so a restart loses nothing.
package devcmd

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferryhq/ferry/cmd/ferry/internal/stack"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/telemetry"
)

// DefaultTenant is the tenant `ferry dev` bootstraps with FERRY_DEV_API_KEY.
const DefaultTenant = "default"

const usage = `Usage: ferry dev [--ready-file PATH] [--env-file PATH]

Runs every service in one process, with the embedded Kafka broker, Postgres and Redis
as its child processes. Once /readyz answers 200, it writes what a client,
a worker of your own or a test needs to join it (API URL, keys, Kafka
brokers, Postgres and Redis URLs, FERRY_SECRET_KEY) as JSON to the ready file
and as shell exports to the env file, both mode 0600 (they hold secrets), and
removes them when it stops.

Flags:
`

// options are the flags of `ferry dev`.
type options struct {
	readyFile, envFile string
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("ferry dev", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.readyFile, "ready-file", "", "write the JSON description of the running stack to `PATH` (default FERRY_DATA_DIR/dev.json)")
	fs.StringVar(&o.envFile, "env-file", "", "write it as shell exports to source to `PATH` (default FERRY_DATA_DIR/dev.env)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return o, nil
}

// Run starts the infrastructure that is not configured, then every service,
// and blocks until ctx is done; then it stops everything it started. args
// are the flags after `ferry dev`; a -h answers flag.ErrHelp.
func Run(ctx context.Context, args []string, lookup func(string) (string, bool), out io.Writer) (err error) {
	opts, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	l := config.NewLoader(lookup)
	dataDir, err := filepath.Abs(l.String("FERRY_DATA_DIR"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	opts = opts.withDefaults(dataDir)
	var stops []func(context.Context) error
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for i := len(stops) - 1; i >= 0; i-- {
			err = errors.Join(err, stops[i](sctx))
		}
	}()
	if err := startInfra(ctx, l, dataDir, &stops); err != nil {
		return err
	}
	keys, err := loadKeys(l, dataDir)
	if err != nil {
		return err
	}
	st, common, err := startStack(ctx, l, dataDir, &stops)
	if err != nil {
		return err
	}
	if err := auth.EnsureTenant(ctx, st.Deps.Postgres, DefaultTenant, "Default tenant (ferry dev)", keys.dev); err != nil {
		return fmt.Errorf("bootstrap default tenant: %w", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- st.Wait() }()
	if err := awaitReadyz(ctx, "http://"+st.Addr+"/readyz", stopped); err != nil {
		return err
	}
	ready := readyOf(st.Addr, common, l, dataDir, keys)
	if err := devstack.WriteReady(ready, opts.readyFile, opts.envFile); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	defer removeReady(opts, os.Getpid())
	printBanner(out, ready, opts)
	err = <-stopped
	fmt.Fprintln(out, "ferry dev: stopped")
	return err
}

// awaitReadyz polls the stack's /readyz until it answers 200, so the ready
// file and the banner mean the stack takes work. It returns early when the
// stack stops or ctx ends.
func awaitReadyz(ctx context.Context, url string, stopped <-chan error) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	for {
		if resp, err := hc.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-stopped:
			return errors.Join(errors.New("stopped before it was ready"), err)
		case <-ctx.Done():
			return <-stopped
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (o options) withDefaults(dataDir string) options {
	if o.readyFile == "" {
		o.readyFile = filepath.Join(dataDir, "dev.json")
	}
	if o.envFile == "" {
		o.envFile = filepath.Join(dataDir, "dev.env")
	}
	return o
}

// removeReady removes the ready and env files unless another `ferry dev`
// has replaced them since.
func removeReady(o options, pid int) {
	if r, err := devstack.ReadReady(o.readyFile); err == nil && r.PID != pid {
		return
	}
	_ = os.Remove(o.readyFile)
	_ = os.Remove(o.envFile)
}

// startInfra starts the embedded Kafka broker and the local Postgres and
// Redis that are not configured, each a child process, and sets their
// addresses as defaults of l.
func startInfra(ctx context.Context, l *config.Loader, dataDir string, stops *[]func(context.Context) error) error {
	if !l.IsSet("FERRY_KAFKA_BROKERS") {
		// One process is the one member of the scheduler's and every
		// projection's consumer group, so more partitions of their topics
		// only cost (fetch entries, batches, audit chains: the 1k/s p50
		// −12 to −16 %, docs/performance.md Round 26). The dispatch topics
		// keep the partitions your own workers need beside the built-in
		// one. Set before the broker starts: it creates the topics.
		if !l.IsSet("FERRY_DISPATCH_PARTITIONS") {
			l.SetDefault("FERRY_DISPATCH_PARTITIONS", l.String("FERRY_TOPIC_PARTITIONS"))
		}
		l.SetDefault("FERRY_TOPIC_PARTITIONS", "1")
		k, addr, err := startKafka(ctx, l, dataDir)
		if err != nil {
			return fmt.Errorf("embedded kafka: %w", err)
		}
		*stops = append(*stops, k.Stop)
		l.SetDefault("FERRY_KAFKA_BROKERS", addr)
		// One embedded broker holds one copy of everything.
		l.SetDefault("FERRY_TOPIC_REPLICATION", "1")
		l.SetDefault("FERRY_TOPIC_MIN_INSYNC", "1")
	}
	if !l.IsSet("FERRY_POSTGRES_URL") {
		p, url, err := devstack.StartPostgres(ctx, devstack.PostgresConfig{
			DataDir:  filepath.Join(dataDir, "postgres"),
			Port:     l.Int("FERRY_DEV_POSTGRES_PORT"),
			Settings: map[string]string{"max_connections": "200"},
		})
		if err != nil {
			return fmt.Errorf("local postgres: %w", err)
		}
		*stops = append(*stops, p.Stop)
		l.SetDefault("FERRY_POSTGRES_URL", url)
	}
	if !l.IsSet("FERRY_REDIS_URL") {
		p, url, err := devstack.StartRedis(ctx, devstack.RedisConfig{
			DataDir: filepath.Join(dataDir, "redis"),
			Port:    l.Int("FERRY_DEV_REDIS_PORT"),
		})
		if err != nil {
			return fmt.Errorf("local redis: %w", err)
		}
		*stops = append(*stops, p.Stop)
		l.SetDefault("FERRY_REDIS_URL", url)
	}
	return nil
}

// devKeys are the secrets `ferry dev` hands to whoever joins it.
type devKeys struct {
	admin, dev string
	// secret is FERRY_SECRET_KEY in base64: the variable, else the key
	// file every service of the stack opens when it is unset.
	secret string
}

// loadKeys returns the admin and dev keys (given, kept from an earlier run
// or generated) and the secret key, and makes them l's defaults.
func loadKeys(l *config.Loader, dataDir string) (devKeys, error) {
	var k devKeys
	var err error
	if k.admin, err = persistentSecret(l, "FERRY_ADMIN_KEY", filepath.Join(dataDir, "admin-key"), "fry_admin_"); err != nil {
		return k, err
	}
	if k.dev, err = persistentSecret(l, "FERRY_DEV_API_KEY", filepath.Join(dataDir, "dev-api-key"), "fry_"); err != nil {
		return k, err
	}
	l.SetDefault("FERRY_ADMIN_KEY", k.admin)
	l.SetDefault("FERRY_OUTBOUND_ALLOW", "127.0.0.0/8")
	if l.IsSet("FERRY_SECRET_KEY") {
		k.secret = l.String("FERRY_SECRET_KEY")
		return k, nil
	}
	// The services fall back to this very file; creating it first lets the
	// ready file carry the key.
	key, _, err := secretbox.LoadOrCreateKeyFile(filepath.Join(dataDir, "secret-key"))
	if err != nil {
		return k, fmt.Errorf("secret key: %w", err)
	}
	k.secret = base64.StdEncoding.EncodeToString(key)
	return k, nil
}

// startStack sets up logging to FERRY_DATA_DIR/ferry.log and telemetry,
// then starts every service.
func startStack(ctx context.Context, l *config.Loader, dataDir string, stops *[]func(context.Context) error) (*stack.Stack, config.Common, error) {
	common := config.LoadCommon(l)
	if err := errors.Join(l.Err(), common.Validate()); err != nil {
		return nil, common, fmt.Errorf("configuration: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(dataDir, "ferry.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, common, err
	}
	*stops = append(*stops, func(context.Context) error { return logFile.Close() })
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "ferry-dev", LogLevel: common.LogLevel, LogOutput: logFile, OTLPEndpoint: common.OTLPEndpoint})
	if err != nil {
		return nil, common, err
	}
	*stops = append(*stops, tel.Shutdown)
	st, err := stack.Start(ctx, common, l, tel)
	return st, common, err
}

// readyOf describes the running stack for the ready file.
func readyOf(addr string, c config.Common, l *config.Loader, dataDir string, k devKeys) devstack.Ready {
	r := devstack.Ready{
		PID:          os.Getpid(),
		APIURL:       "http://" + addr,
		Tenant:       DefaultTenant,
		APIKey:       k.dev,
		AdminKey:     k.admin,
		KafkaBrokers: c.KafkaBrokers,
		TopicPrefix:  l.String("FERRY_TOPIC_PREFIX"),
		PostgresURL:  c.PostgresURL,
		RedisURL:     c.RedisURL,
		SecretKey:    k.secret,
		DataDir:      dataDir,
	}
	r.Env = r.JoinEnv(l.Int("FERRY_TOPIC_REPLICATION"), l.Int("FERRY_TOPIC_MIN_INSYNC"),
		l.Int("FERRY_TOPIC_PARTITIONS"), l.String("FERRY_OUTBOUND_ALLOW"))
	return r
}

// persistentSecret returns the variable's value, else the key kept in file,
// else a fresh key written to file (mode 0600) so restarts keep it.
func persistentSecret(l *config.Loader, name, file, prefix string) (string, error) {
	if l.IsSet(name) {
		return l.String(name), nil
	}
	if b, err := os.ReadFile(file); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	buf := make([]byte, 24)
	_, _ = rand.Read(buf)
	key := prefix + base64.RawURLEncoding.EncodeToString(buf)
	if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
		return "", err
	}
	return key, nil
}

func printBanner(out io.Writer, r devstack.Ready, o options) {
	fmt.Fprintf(out, `Ferry dev is running (Ctrl-C to stop)

  Console        %[1]s/console   (sign in with the dev API key or the admin key)
  API            %[1]s/v1/jobs
  OpenAPI        %[1]s/v1/openapi.json
  Health         %[1]s/healthz  %[1]s/readyz  %[1]s/metrics
  Kafka          %[2]s   (kcat -b %[2]s -L)
  Postgres       %[3]s
  Redis          %[4]s
  Data           %[5]s   (logs in ferry.log)
  Admin key      %[6]s
  Dev API key    %[7]s   (tenant %[8]q, also in %[9]s)
  Ready file     %[10]s   (JSON; mode 0600: holds the keys)
  Env file       %[11]s   (source it to run a worker of your own or the CLI)

Try:
  curl -s -X POST %[1]s/v1/jobs -H "Authorization: Bearer %[7]s" \
       -H 'Content-Type: application/json' -d '{"type":"sleep","payload":{"ms":2000}}'
`, r.APIURL, strings.Join(r.KafkaBrokers, ","), r.PostgresURL, r.RedisURL, r.DataDir, r.AdminKey, r.APIKey,
		r.Tenant, filepath.Join(r.DataDir, "dev-api-key"), o.readyFile, o.envFile)
}
