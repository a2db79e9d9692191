package config

import (
	"strings"
	"testing"
)

func loadKafkaEnv(env map[string]string) (Common, error) {
	l := NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	c := LoadCommon(l)
	if err := l.Err(); err != nil {
		return c, err
	}
	return c, c.Validate()
}

func TestKafkaSettingsDefaults(t *testing.T) {
	c, err := loadKafkaEnv(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Production-safe topic settings unless relaxed (ferry dev, tests).
	if c.TopicReplication != 3 || c.TopicMinInsync != 2 || c.Env != EnvDevelopment {
		t.Errorf("replication %d, min.insync %d, env %q; want 3, 2, development", c.TopicReplication, c.TopicMinInsync, c.Env)
	}
	if c.KafkaSecurity != (KafkaSecurity{}) {
		t.Errorf("security %+v, want plaintext without SASL", c.KafkaSecurity)
	}
}

func TestKafkaSecurityFromEnv(t *testing.T) {
	c, err := loadKafkaEnv(map[string]string{
		"FERRY_ENV":                      "Production",
		"FERRY_KAFKA_TLS_CA_FILE":        "/etc/kafka/ca.pem",
		"FERRY_KAFKA_SASL_MECHANISM":     "scram-sha-512",
		"FERRY_KAFKA_SASL_USERNAME":      "ferry",
		"FERRY_KAFKA_SASL_PASSWORD_FILE": "/run/secrets/kafka",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := KafkaSecurity{TLS: true, TLSCAFile: "/etc/kafka/ca.pem", SASLMechanism: "SCRAM-SHA-512", SASLUsername: "ferry", SASLPasswordFile: "/run/secrets/kafka"}
	if c.KafkaSecurity != want || c.Env != EnvProduction {
		t.Errorf("got %+v env %q, want %+v (a CA file implies TLS) and production", c.KafkaSecurity, c.Env, want)
	}
}

func TestKafkaSettingsRejected(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"FERRY_KAFKA_TLS": "maybe"}, "FERRY_KAFKA_TLS"},
		{map[string]string{"FERRY_ENV": "staging"}, "FERRY_ENV"},
		{map[string]string{"FERRY_TOPIC_REPLICATION": "0"}, "FERRY_TOPIC_REPLICATION"},
		{map[string]string{"FERRY_TOPIC_MIN_INSYNC": "0"}, "FERRY_TOPIC_MIN_INSYNC"},
		{map[string]string{"FERRY_KAFKA_SASL_MECHANISM": "PLAIN", "FERRY_KAFKA_SASL_USERNAME": "u"}, "FERRY_KAFKA_SASL_PASSWORD"},
		{map[string]string{"FERRY_KAFKA_SASL_MECHANISM": "KERBEROS"}, "FERRY_KAFKA_SASL_MECHANISM"},
		{map[string]string{"FERRY_KAFKA_TLS_KEY_FILE": "/k.pem"}, "FERRY_KAFKA_TLS_CERT_FILE"},
	} {
		if _, err := loadKafkaEnv(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
}
