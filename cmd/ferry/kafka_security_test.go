package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/cmd/ferry/internal/stack"
	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/kafkax/kafkatest"
	"github.com/ferryhq/ferry/platform/testenv"
)

// secureBroker is an embedded broker as hosted Kafka runs it (SASL_SSL): a
// TLS listener signed by a private CA and a SCRAM-SHA-512 user, and the
// environment that points Ferry at it, the password in a file.
func secureBroker(t *testing.T, password string) (*kafkatest.Broker, map[string]string) {
	t.Helper()
	b := kafkatest.Start(t, kafkatest.Options{TLS: true, Users: []devstack.SASLUser{{Mechanism: "SCRAM-SHA-512", User: "ferry", Password: "s3cret"}}})
	return b, map[string]string{
		"FERRY_KAFKA_BROKERS":            b.Addr,
		"FERRY_KAFKA_TLS":                "true",
		"FERRY_KAFKA_TLS_CA_FILE":        b.CA.File,
		"FERRY_KAFKA_SASL_MECHANISM":     "SCRAM-SHA-512",
		"FERRY_KAFKA_SASL_USERNAME":      "ferry",
		"FERRY_KAFKA_SASL_PASSWORD_FILE": kafkatest.WriteSecret(t, "kafka-password", password+"\n"),
	}
}

// TestKafkaSASLOverTLS runs the whole stack — the api's producer, the
// scheduler's and workers' consumers, every projection — against a broker
// that accepts only authenticated TLS connections: a job runs to succeeded.
func TestKafkaSASLOverTLS(t *testing.T) {
	b, env := secureBroker(t, "s3cret")

	// The broker really refuses what is not TLS and SASL: a plain client
	// gets nowhere.
	plain, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	if err := plain.Ping(ctx); err == nil {
		t.Fatal("the broker answered a client without TLS and SASL")
	}
	cancel()
	plain.Close()

	e := startStack(t, env)
	id := e.submit(map[string]any{"type": "noop", "payload": map[string]any{"secured": true}})
	job := e.waitStatus(id, "succeeded", 30*time.Second)
	if job["attempt"] != float64(1) {
		t.Errorf("job %v: want one attempt", job)
	}
	// A retried job goes round every topic once more (failed, enqueued
	// by the scheduler, dispatch), still over the secured connections.
	id = e.submit(map[string]any{
		"type": "fail", "payload": map[string]any{"times": 5, "class": "app_error"},
		"max_attempts": 2, "backoff": map[string]any{"base": "10ms", "max": "10ms", "jitter": 0},
	})
	if dead := e.waitStatus(id, "dead", 30*time.Second); dead["attempt"] != float64(2) {
		t.Errorf("dead job %v: want two attempts", dead)
	}
}

// TestKafkaWrongPasswordStopsTheStart: with a wrong password the stack does
// not start (no retry loop), and the error names the settings to fix.
func TestKafkaWrongPasswordStopsTheStart(t *testing.T) {
	_, env := secureBroker(t, "not-the-password")
	vars := map[string]string{
		"FERRY_HTTP_ADDR":         "127.0.0.1:0",
		"FERRY_POSTGRES_URL":      testenv.Postgres(t),
		"FERRY_REDIS_URL":         testenv.Redis(t),
		"FERRY_TOPIC_REPLICATION": "1",
		"FERRY_TOPIC_MIN_INSYNC":  "1",
		"FERRY_DATA_DIR":          t.TempDir(),
	}
	for k, v := range env {
		vars[k] = v
	}
	l := config.NewLoader(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	common := config.LoadCommon(l)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	tel, err := setupTelemetry()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	st, err := stack.Start(ctx, common, l, tel)
	if err == nil {
		cancel()
		_ = st.Wait()
		t.Fatal("the stack started with a wrong Kafka password")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %s to fail: a wrong password must stop the start at once", took)
	}
	for _, want := range []string{"FERRY_KAFKA_SASL_PASSWORD", "SCRAM-SHA-512", `"ferry"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "not-the-password") {
		t.Errorf("error %q carries the password", err)
	}
}
