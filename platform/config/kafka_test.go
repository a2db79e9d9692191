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
		{map[string]string{"FERRY_DISPATCH_PARTITIONS": "0"}, "FERRY_DISPATCH_PARTITIONS"},
	} {
		if _, err := loadKafkaEnv(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %s", tc.env, err, tc.want)
		}
	}
}

// TestDispatchPartitionsFollowTopicPartitionsUnlessSet: the dispatch topics
// take FERRY_TOPIC_PARTITIONS unless FERRY_DISPATCH_PARTITIONS is set, also
// through a default (how `ferry dev` keeps 8 for them and 1 for the rest).
func TestDispatchPartitionsFollowTopicPartitionsUnlessSet(t *testing.T) {
	c, err := loadKafkaEnv(map[string]string{"FERRY_TOPIC_PARTITIONS": "12"})
	if err != nil {
		t.Fatal(err)
	}
	if c.TopicPartitions != 12 || c.DispatchTopicPartitions() != 12 {
		t.Errorf("unset: topics %d, dispatch %d; want 12 and 12", c.TopicPartitions, c.DispatchTopicPartitions())
	}
	c, err = loadKafkaEnv(map[string]string{"FERRY_TOPIC_PARTITIONS": "1", "FERRY_DISPATCH_PARTITIONS": "8"})
	if err != nil {
		t.Fatal(err)
	}
	if c.TopicPartitions != 1 || c.DispatchTopicPartitions() != 8 {
		t.Errorf("set: topics %d, dispatch %d; want 1 and 8", c.TopicPartitions, c.DispatchTopicPartitions())
	}
	l := NewLoader(func(string) (string, bool) { return "", false })
	l.SetDefault("FERRY_DISPATCH_PARTITIONS", "8")
	l.SetDefault("FERRY_TOPIC_PARTITIONS", "1")
	if c = LoadCommon(l); l.Err() != nil || c.TopicPartitions != 1 || c.DispatchTopicPartitions() != 8 {
		t.Errorf("defaults: topics %d, dispatch %d, err %v; want 1 and 8", c.TopicPartitions, c.DispatchTopicPartitions(), l.Err())
	}
}
