package kafkax

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/kafkax/kafkatest"
)

// roundTrip connects with cfg (the startup check), creates a topic,
// produces one record and reads it back: every kind of request a Ferry
// service makes (metadata, admin, produce, fetch) over the secured client.
func roundTrip(t *testing.T, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := CheckConnection(ctx, cl, cfg, 10*time.Second); err != nil {
		t.Fatalf("CheckConnection: %v", err)
	}
	topic := fmt.Sprintf("secured-%d", topicSeq.Add(1))
	if err := EnsureTopics(ctx, cl, TopicSpec{Names: []string{topic}, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := ProduceAll(ctx, cl, &kgo.Record{Topic: topic, Value: []byte("hello")}); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons, err := NewClient(cfg, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	fs := cons.PollFetches(ctx)
	if err := fs.Err(); err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "hello" {
		t.Fatalf("fetched %v, want the one record produced", recs)
	}
}

var topicSeq atomic.Int64

func TestSASLMechanisms(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			b := kafkatest.Start(t, kafkatest.Options{Users: []devstack.SASLUser{{Mechanism: mech, User: "ferry", Password: "s3cret-" + mech}}})
			roundTrip(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{
				SASLMechanism: mech, SASLUsername: "ferry", SASLPassword: config.Secret("s3cret-" + mech),
			}})
		})
	}
}

func TestSASLPasswordFile(t *testing.T) {
	b := kafkatest.Start(t, kafkatest.Options{Users: []devstack.SASLUser{{Mechanism: "SCRAM-SHA-256", User: "ferry", Password: "from-a-file"}}})
	// A trailing newline, as `echo` and most secret stores write, is not
	// part of the password.
	file := kafkatest.WriteSecret(t, "password", "from-a-file\n")
	roundTrip(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{
		SASLMechanism: "SCRAM-SHA-256", SASLUsername: "ferry", SASLPasswordFile: file,
	}})
}

// TestWrongPasswordIsAStartupError: a wrong password fails the startup
// check at once, with a message naming the settings and never the password.
func TestWrongPasswordIsAStartupError(t *testing.T) {
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			b := kafkatest.Start(t, kafkatest.Options{Users: []devstack.SASLUser{{Mechanism: mech, User: "ferry", Password: "right"}}})
			cfg := Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{
				SASLMechanism: mech, SASLUsername: "ferry", SASLPassword: "wrong-password-xyz",
			}}
			err, took := checkOnce(t, cfg, 30*time.Second)
			if err == nil {
				t.Fatal("a wrong password passed the startup check")
			}
			t.Logf("%s: %v", took, err)
			if took > 5*time.Second {
				t.Errorf("the startup check took %s: a wrong password must fail at once, not retry until the timeout", took)
			}
			for _, want := range []string{"FERRY_KAFKA_SASL_USERNAME", "FERRY_KAFKA_SASL_PASSWORD", `"ferry"`, mech} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %s", err, want)
				}
			}
			if strings.Contains(err.Error(), "wrong-password-xyz") {
				t.Errorf("error %q carries the password", err)
			}
		})
	}
}

// checkOnce runs the startup check of a fresh client on cfg.
func checkOnce(t *testing.T, cfg Config, timeout time.Duration) (error, time.Duration) {
	t.Helper()
	cl, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	start := time.Now()
	err = CheckConnection(context.Background(), cl, cfg, timeout)
	return err, time.Since(start)
}

func TestUnreadablePasswordFileIsAStartupError(t *testing.T) {
	b := kafkatest.Start(t, kafkatest.Options{Users: []devstack.SASLUser{{Mechanism: "PLAIN", User: "ferry", Password: "right"}}})
	for name, file := range map[string]string{
		"missing": t.TempDir() + "/nope",
		"empty":   kafkatest.WriteSecret(t, "empty", "\n"),
	} {
		t.Run(name, func(t *testing.T) {
			err, took := checkOnce(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{
				SASLMechanism: "PLAIN", SASLUsername: "ferry", SASLPasswordFile: file,
			}}, 30*time.Second)
			if err == nil || !strings.Contains(err.Error(), "FERRY_KAFKA_SASL_PASSWORD_FILE") || took > 5*time.Second {
				t.Fatalf("got %v after %s, want at once an error naming FERRY_KAFKA_SASL_PASSWORD_FILE", err, took)
			}
		})
	}
}

func TestTLS(t *testing.T) {
	b := kafkatest.Start(t, kafkatest.Options{TLS: true})
	t.Run("CA file", func(t *testing.T) {
		roundTrip(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{TLS: true, TLSCAFile: b.CA.File}})
	})
	t.Run("server name override", func(t *testing.T) {
		// The certificate names localhost and 127.0.0.1; connecting by IP
		// while checking the name localhost must work.
		roundTrip(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{TLS: true, TLSCAFile: b.CA.File, TLSServerName: "localhost"}})
	})
	t.Run("insecure skip verify", func(t *testing.T) {
		roundTrip(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{TLS: true, TLSInsecureSkipVerify: true}})
	})

	fails := []struct {
		name string
		sec  config.KafkaSecurity
		want string
	}{
		{"wrong CA", config.KafkaSecurity{TLS: true, TLSCAFile: kafkatest.NewCA(t, "another CA").File}, "FERRY_KAFKA_TLS_CA_FILE"},
		{"system roots", config.KafkaSecurity{TLS: true}, "FERRY_KAFKA_TLS_CA_FILE"},
		{"wrong server name", config.KafkaSecurity{TLS: true, TLSCAFile: b.CA.File, TLSServerName: "kafka.example.com"}, "FERRY_KAFKA_TLS_SERVER_NAME"},
	}
	for _, tc := range fails {
		t.Run(tc.name, func(t *testing.T) {
			err, took := checkOnce(t, Config{Brokers: []string{b.Addr}, Security: tc.sec}, 30*time.Second)
			if err == nil {
				t.Fatal("the startup check passed")
			}
			t.Logf("%s: %v", took, err)
			if took > 5*time.Second {
				t.Errorf("took %s: a certificate error must fail at once", took)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %s", err, tc.want)
			}
		})
	}

	t.Run("plaintext client", func(t *testing.T) {
		// The broker closes a connection that does not start with a TLS
		// handshake, which looks like a broker still starting: the check
		// retries until its timeout, then says TLS may be missing.
		err, _ := checkOnce(t, Config{Brokers: []string{b.Addr}}, 2*time.Second)
		if err == nil || !strings.Contains(err.Error(), "FERRY_KAFKA_TLS") {
			t.Fatalf("got %v, want an error naming FERRY_KAFKA_TLS", err)
		}
	})
	t.Run("bad CA file", func(t *testing.T) {
		_, err := NewClient(Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{TLS: true, TLSCAFile: kafkatest.WriteSecret(t, "ca.pem", "not a certificate")}})
		if err == nil || !strings.Contains(err.Error(), "FERRY_KAFKA_TLS_CA_FILE") {
			t.Fatalf("got %v, want an error naming FERRY_KAFKA_TLS_CA_FILE", err)
		}
	})
}

func TestMutualTLS(t *testing.T) {
	clientCA := kafkatest.NewCA(t, "client CA")
	b := kafkatest.Start(t, kafkatest.Options{TLS: true, ClientCA: clientCA})
	_, certFile, keyFile := clientCA.Issue(t, "ferry-client")
	roundTrip(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{
		TLS: true, TLSCAFile: b.CA.File, TLSCertFile: certFile, TLSKeyFile: keyFile,
	}})

	// Without a client certificate, the broker refuses the handshake. Go's
	// TLS 1.3 client learns that on its first read, so the check sees it
	// as an alert (at once) or, when the connection is torn down first, as
	// a broker that does not answer (at the timeout): either way the error
	// names a setting to look at.
	err, _ := checkOnce(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{TLS: true, TLSCAFile: b.CA.File}}, 3*time.Second)
	if err == nil {
		t.Fatal("a client without a certificate passed the startup check")
	}
	if !strings.Contains(err.Error(), "FERRY_KAFKA_TLS") {
		t.Errorf("error %q names no FERRY_KAFKA_TLS setting", err)
	}
}

// TestSASLOverTLS is how hosted Kafka runs (SASL_SSL).
func TestSASLOverTLS(t *testing.T) {
	b := kafkatest.Start(t, kafkatest.Options{TLS: true, Users: []devstack.SASLUser{{Mechanism: "SCRAM-SHA-512", User: "ferry", Password: "pw"}}})
	roundTrip(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{
		TLS: true, TLSCAFile: b.CA.File, SASLMechanism: "SCRAM-SHA-512", SASLUsername: "ferry", SASLPassword: "pw",
	}})
	err, took := checkOnce(t, Config{Brokers: []string{b.Addr}, Security: config.KafkaSecurity{
		TLS: true, TLSCAFile: b.CA.File, SASLMechanism: "SCRAM-SHA-512", SASLUsername: "ferry", SASLPassword: "nope",
	}}, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "FERRY_KAFKA_SASL_PASSWORD") || took > 5*time.Second {
		t.Fatalf("wrong password over TLS: %v after %s, want at once an error naming FERRY_KAFKA_SASL_PASSWORD", err, took)
	}
}

// TestOAuthBearer: the embedded broker has no OAUTHBEARER, so this checks
// what Ferry sends (the token file's content, re-read at each
// authentication) and that a broker without the mechanism is a clear
// startup error.
func TestOAuthBearer(t *testing.T) {
	file := kafkatest.WriteSecret(t, "token", "token-one\n")
	sec := config.KafkaSecurity{SASLMechanism: "OAUTHBEARER", SASLTokenFile: file}
	m := saslMechanism(sec)
	if m == nil || m.Name() != "OAUTHBEARER" {
		t.Fatalf("mechanism %v, want OAUTHBEARER", m)
	}
	first := func() string {
		_, msg, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	if got := first(); !strings.Contains(got, "auth=Bearer token-one\x01") {
		t.Errorf("first message %q does not carry the token", got)
	}
	if err := os.WriteFile(file, []byte("token-two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := first(); !strings.Contains(got, "auth=Bearer token-two\x01") {
		t.Errorf("after the token file changed, first message %q does not carry the new token", got)
	}

	b := kafkatest.Start(t, kafkatest.Options{Users: []devstack.SASLUser{{Mechanism: "PLAIN", User: "u", Password: "p"}}})
	err, took := checkOnce(t, Config{Brokers: []string{b.Addr}, Security: sec}, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "FERRY_KAFKA_SASL_MECHANISM=OAUTHBEARER") || took > 5*time.Second {
		t.Fatalf("got %v after %s, want at once an error naming FERRY_KAFKA_SASL_MECHANISM=OAUTHBEARER", err, took)
	}
}

// TestSecretsNeverPrinted: the password does not appear however the
// configuration is formatted or logged.
func TestSecretsNeverPrinted(t *testing.T) {
	cfg := Config{Brokers: []string{"b:9092"}, Security: config.KafkaSecurity{
		SASLMechanism: "PLAIN", SASLUsername: "ferry", SASLPassword: "hunter2-secret",
	}}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "cfg", cfg, "sec", cfg.Security)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "cfg", cfg, "password", cfg.Security.SASLPassword)
	out := fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg.Security.SASLPassword) + logged.String()
	if strings.Contains(out, "hunter2-secret") {
		t.Fatalf("the password was printed: %s", out)
	}
	if !strings.Contains(out, "[redacted]") {
		t.Fatalf("no redaction marker in %s", out)
	}
	if cfg.Security.SASLPassword.Reveal() != "hunter2-secret" {
		t.Fatal("Reveal does not return the password")
	}
}

func TestSecurityValidate(t *testing.T) {
	for _, tc := range []struct {
		sec  config.KafkaSecurity
		want string
	}{
		{config.KafkaSecurity{SASLMechanism: "GSSAPI"}, "FERRY_KAFKA_SASL_MECHANISM"},
		{config.KafkaSecurity{SASLMechanism: "PLAIN", SASLPassword: "x"}, "FERRY_KAFKA_SASL_USERNAME"},
		{config.KafkaSecurity{SASLMechanism: "PLAIN", SASLUsername: "u"}, "exactly one of FERRY_KAFKA_SASL_PASSWORD"},
		{config.KafkaSecurity{SASLMechanism: "PLAIN", SASLUsername: "u", SASLPassword: "x", SASLPasswordFile: "/f"}, "exactly one of FERRY_KAFKA_SASL_PASSWORD"},
		{config.KafkaSecurity{SASLMechanism: "OAUTHBEARER"}, "FERRY_KAFKA_SASL_TOKEN_FILE"},
		{config.KafkaSecurity{SASLUsername: "u"}, "FERRY_KAFKA_SASL_MECHANISM is empty"},
		{config.KafkaSecurity{TLS: true, TLSCertFile: "/c"}, "FERRY_KAFKA_TLS_KEY_FILE"},
	} {
		_, err := NewClient(Config{Brokers: []string{"b:9092"}, Security: tc.sec})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.sec, err, tc.want)
		}
	}
}

// TestFatalHints: the errors Kafka itself answers (the embedded broker only
// closes the connection on a wrong password) fail the check at once, each
// naming the setting to change.
func TestFatalHints(t *testing.T) {
	cfg := Config{Security: config.KafkaSecurity{SASLMechanism: "SCRAM-SHA-256", SASLUsername: "ferry"}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("sasl: %w", kerr.SaslAuthenticationFailed), "FERRY_KAFKA_SASL_PASSWORD"},
		{kerr.UnsupportedSaslMechanism, "FERRY_KAFKA_SASL_MECHANISM=SCRAM-SHA-256"},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, "FERRY_KAFKA_TLS_CERT_FILE"},
		{&secretError{errors.New("kafkax: FERRY_KAFKA_SASL_PASSWORD_FILE: no such file")}, "SASL secret"},
	} {
		if got := fatalHint(tc.err, cfg); !strings.Contains(got, tc.want) {
			t.Errorf("fatalHint(%v) = %q, want it to name %s", tc.err, got, tc.want)
		}
	}
	for _, retry := range []error{io.EOF, context.DeadlineExceeded, &net.OpError{Op: "dial", Err: errors.New("connection refused")}} {
		if got := fatalHint(retry, cfg); got != "" {
			t.Errorf("fatalHint(%v) = %q: a broker that may still be starting must be retried", retry, got)
		}
	}
}
