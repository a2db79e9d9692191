// Package devcmd implements `ferry dev`: the whole pipeline in one process,
// with an embedded Kafka broker and local Postgres and Redis child processes
// whose data lives under FERRY_DATA_DIR, so a restart loses nothing.
package devcmd

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferryhq/ferry/cmd/ferry/internal/stack"
	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/telemetry"
)

// DefaultTenant is the tenant `ferry dev` bootstraps with FERRY_DEV_API_KEY.
const DefaultTenant = "default"

// Run starts the infrastructure that is not configured, then every service,
// and blocks until ctx is done; then it stops everything it started.
func Run(ctx context.Context, lookup func(string) (string, bool), out io.Writer) (err error) {
	l := config.NewLoader(lookup)
	dataDir, err := filepath.Abs(l.String("FERRY_DATA_DIR"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	var stops []func(context.Context) error
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for i := len(stops) - 1; i >= 0; i-- {
			err = errors.Join(err, stops[i](sctx))
		}
	}()

	topics := schema.Topics{Prefix: l.String("FERRY_TOPIC_PREFIX")}
	if !l.IsSet("FERRY_KAFKA_BROKERS") {
		k, err := devstack.StartKafka(devstack.KafkaConfig{
			Addr:       l.String("FERRY_DEV_KAFKA_ADDR"),
			DataDir:    filepath.Join(dataDir, "kafka"),
			Partitions: l.Int("FERRY_TOPIC_PARTITIONS"),
			Topics:     topics.All(),
		})
		if err != nil {
			return fmt.Errorf("embedded kafka: %w", err)
		}
		stops = append(stops, k.Stop)
		l.SetDefault("FERRY_KAFKA_BROKERS", k.Addr())
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
		stops = append(stops, p.Stop)
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
		stops = append(stops, p.Stop)
		l.SetDefault("FERRY_REDIS_URL", url)
	}
	adminKey, err := persistentSecret(l, "FERRY_ADMIN_KEY", filepath.Join(dataDir, "admin-key"), "fry_admin_")
	if err != nil {
		return err
	}
	devKey, err := persistentSecret(l, "FERRY_DEV_API_KEY", filepath.Join(dataDir, "dev-api-key"), "fry_")
	if err != nil {
		return err
	}
	l.SetDefault("FERRY_ADMIN_KEY", adminKey)
	l.SetDefault("FERRY_OUTBOUND_ALLOW", "127.0.0.0/8")

	common := config.LoadCommon(l)
	if err := errors.Join(l.Err(), common.Validate()); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(dataDir, "ferry.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	tel, err := telemetry.Setup(ctx, telemetry.Options{Service: "ferry-dev", LogLevel: common.LogLevel, LogOutput: logFile, OTLPEndpoint: common.OTLPEndpoint})
	if err != nil {
		return err
	}
	stops = append(stops, tel.Shutdown)
	st, err := stack.Start(ctx, common, l, tel)
	if err != nil {
		return err
	}
	if err := auth.EnsureTenant(ctx, st.Deps.Postgres, DefaultTenant, "Default tenant (ferry dev)", devKey); err != nil {
		return fmt.Errorf("bootstrap default tenant: %w", err)
	}
	printBanner(out, st.Addr, common, dataDir, adminKey, devKey)
	err = st.Wait()
	fmt.Fprintln(out, "ferry dev: stopped")
	return err
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

func printBanner(out io.Writer, addr string, c config.Common, dataDir, adminKey, devKey string) {
	base := "http://" + addr
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

Try:
  curl -s -X POST %[1]s/v1/jobs -H "Authorization: Bearer %[7]s" \
       -H 'Content-Type: application/json' -d '{"type":"sleep","payload":{"ms":2000}}'
`, base, strings.Join(c.KafkaBrokers, ","), c.PostgresURL, c.RedisURL, dataDir, adminKey, devKey,
		DefaultTenant, filepath.Join(dataDir, "dev-api-key"))
}
