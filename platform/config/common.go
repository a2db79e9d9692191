package config

import (
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"time"
)

// Common is the configuration every Ferry service shares, read by
// [LoadCommon]; each field's variable and its default are declared in
// [Vars].
type Common struct {
	// HTTPAddr is where the HTTP server listens (FERRY_HTTP_ADDR).
	HTTPAddr string
	// KafkaBrokers are the seed brokers.
	KafkaBrokers []string
	// TopicPrefix prefixes every topic (FERRY_TOPIC_PREFIX).
	TopicPrefix string
	// TopicPartitions is the partition count of topics Ferry creates
	// (FERRY_TOPIC_PARTITIONS), but for the dispatch topics.
	TopicPartitions int
	// DispatchPartitions is the partition count of the dispatch topics Ferry
	// creates (FERRY_DISPATCH_PARTITIONS); 0 means TopicPartitions (see
	// DispatchTopicPartitions). Apart from TopicPartitions because the two
	// bound different members: a pool's workers here, the scheduler's and
	// the projections' there.
	DispatchPartitions int
	// TopicRetention is the retention of topics Ferry creates
	// (FERRY_TOPIC_RETENTION).
	TopicRetention time.Duration
	// KafkaLinger is the producer linger (FERRY_KAFKA_LINGER).
	KafkaLinger time.Duration
	// KafkaSecurity is TLS and SASL towards the brokers.
	KafkaSecurity KafkaSecurity
	// TopicReplication and TopicMinInsync are the replication factor and
	// min.insync.replicas of topics Ferry creates (FERRY_TOPIC_REPLICATION,
	// FERRY_TOPIC_MIN_INSYNC).
	TopicReplication int
	TopicMinInsync   int
	// Env is development or production (FERRY_ENV). Production refuses to
	// run on topics that would lose acknowledged records on one broker failure.
	Env string
	// PostgresURL and RedisURL locate the stores.
	PostgresURL string
	// PostgresMaxConns bounds each pool (FERRY_POSTGRES_MAX_CONNS).
	PostgresMaxConns int
	// PostgresMigrate applies migrations at start; false only checks them
	// (services running as a role without DDL rights; FERRY_POSTGRES_MIGRATE).
	PostgresMigrate bool
	RedisURL        string
	// Redis is ACL credentials, TLS and Sentinel for Redis.
	Redis RedisOptions
	// AdminKey authorises operator routes; empty disables them.
	AdminKey string
	// OutboundAllow are CIDRs outbound HTTP (the worker's http handler,
	// webhooks) may reach despite the SSRF guard (FERRY_OUTBOUND_ALLOW).
	OutboundAllow []netip.Prefix
	// LogLevel is the minimum slog level (FERRY_LOG_LEVEL).
	LogLevel slog.Level
	// ShutdownTimeout bounds a graceful stop (FERRY_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// OTLPEndpoint, when set, receives traces over OTLP/gRPC.
	OTLPEndpoint string
	// ServiceName overrides the OpenTelemetry service name.
	ServiceName string
}

// LoadCommon reads the shared settings.
func LoadCommon(l *Loader) Common {
	c := Common{
		HTTPAddr:         l.String("FERRY_HTTP_ADDR"),
		KafkaBrokers:     l.List("FERRY_KAFKA_BROKERS"),
		TopicPrefix:      l.String("FERRY_TOPIC_PREFIX"),
		TopicPartitions:  l.Int("FERRY_TOPIC_PARTITIONS"),
		TopicRetention:   l.Duration("FERRY_TOPIC_RETENTION"),
		KafkaLinger:      l.Duration("FERRY_KAFKA_LINGER"),
		KafkaSecurity:    LoadKafkaSecurity(l),
		TopicReplication: l.Int("FERRY_TOPIC_REPLICATION"),
		TopicMinInsync:   l.Int("FERRY_TOPIC_MIN_INSYNC"),
		Env:              strings.ToLower(l.String("FERRY_ENV")),
		PostgresURL:      l.String("FERRY_POSTGRES_URL"),
		PostgresMaxConns: l.Int("FERRY_POSTGRES_MAX_CONNS"),
		PostgresMigrate:  kafkaBool(l, "FERRY_POSTGRES_MIGRATE"),
		RedisURL:         l.String("FERRY_REDIS_URL"),
		Redis:            LoadRedisOptions(l),
		AdminKey:         l.String("FERRY_ADMIN_KEY"),
		OutboundAllow:    l.Prefixes("FERRY_OUTBOUND_ALLOW"),
		ShutdownTimeout:  l.Duration("FERRY_SHUTDOWN_TIMEOUT"),
		OTLPEndpoint:     l.String("OTEL_EXPORTER_OTLP_ENDPOINT"),
		ServiceName:      l.String("OTEL_SERVICE_NAME"),
	}
	if l.String("FERRY_DISPATCH_PARTITIONS") != "" { // set, or a default `ferry dev` gives it
		if c.DispatchPartitions = l.Int("FERRY_DISPATCH_PARTITIONS"); c.DispatchPartitions < 1 {
			l.errs = append(l.errs, errors.New("FERRY_DISPATCH_PARTITIONS must be ≥ 1"))
		}
	}
	if err := c.LogLevel.UnmarshalText([]byte(l.String("FERRY_LOG_LEVEL"))); err != nil {
		l.errs = append(l.errs, errors.New("FERRY_LOG_LEVEL: use debug, info, warn or error"))
	}
	return c
}

// DispatchTopicPartitions is the partition count of the dispatch topics
// Ferry creates: DispatchPartitions, or TopicPartitions when it is 0.
func (c Common) DispatchTopicPartitions() int {
	if c.DispatchPartitions > 0 {
		return c.DispatchPartitions
	}
	return c.TopicPartitions
}

// Validate reports settings that cannot work.
func (c Common) Validate() error {
	var errs []error
	if len(c.KafkaBrokers) == 0 {
		errs = append(errs, errors.New("FERRY_KAFKA_BROKERS is empty"))
	}
	if c.TopicPartitions < 1 {
		errs = append(errs, errors.New("FERRY_TOPIC_PARTITIONS must be ≥ 1"))
	}
	if c.PostgresMaxConns < 1 {
		errs = append(errs, errors.New("FERRY_POSTGRES_MAX_CONNS must be ≥ 1"))
	}
	errs = append(errs, c.KafkaSecurity.Validate(), c.validateTopicDurability(), c.Redis.Validate())
	return errors.Join(errs...)
}
