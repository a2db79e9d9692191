// Package kafkax builds franz-go clients the way every Ferry service needs
// them: durable producers (acks=all, idempotent), consumer groups tuned for
// low latency, traced through kotel, and topic creation.
package kafkax

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel"

	"github.com/ferryhq/ferry/platform/config"
)

// Config says how to reach Kafka.
type Config struct {
	Brokers []string
	// ClientID names the client in broker logs. Defaults to "ferry".
	ClientID string
	// Linger is the producer linger. Defaults to 0: records go out at once,
	// and still batch under load while earlier requests are in flight.
	Linger time.Duration
	// Security is TLS and SASL towards the brokers; the zero value is
	// plaintext without authentication.
	Security config.KafkaSecurity
}

// Tracer returns a kotel tracer over the global OpenTelemetry providers (set
// up by the telemetry package), plus opts (kotel.ClientID,
// kotel.ConsumerGroup). Its hooks inject the W3C traceparent header into
// produced records and extract it from fetched ones.
//
// Consumer spans are children of the producer's span, not new roots linked
// to it: a job is one trace from the HTTP request through every Kafka hop,
// and a record's Context (after it is polled) carries the job's trace, so
// work started from it (WithProcessSpan, a handler span, records produced
// with it) continues that trace. Sampling is parent-based, so a job that is
// not sampled costs no recorded spans downstream either.
func Tracer(opts ...kotel.TracerOpt) *kotel.Tracer {
	return kotel.NewTracer(append([]kotel.TracerOpt{
		kotel.TracerProvider(otel.GetTracerProvider()),
		kotel.TracerPropagator(otel.GetTextMapPropagator()),
	}, opts...)...)
}

// NewClient returns a client that produces durably (acks=all, idempotent
// writes, records keyed by job id stay in order per partition) plus any extra
// options, such as those of [Group].
func NewClient(cfg Config, extra ...kgo.Opt) (*kgo.Client, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafkax: no brokers configured")
	}
	id := cfg.ClientID
	if id == "" {
		id = "ferry"
	}
	sec, err := securityOpts(cfg.Security)
	if err != nil {
		return nil, err
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(id),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(cfg.Linger),
		kgo.RecordPartitioner(partitioner{base: kgo.StickyKeyPartitioner(nil)}), // partition.go
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.WithHooks(hooks{t: Tracer(kotel.ClientID(id))}, requestStats.counts(id)),
		kgo.WithLogger(clientLogger{}),
	}
	opts = append(opts, sec...)
	opts = append(opts, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkax: new client: %w", err)
	}
	return cl, nil
}

// Group returns the options of a classic consumer group on topics that
// commits nothing by itself: the caller commits (or stores offsets in its own
// transaction) after processing. New groups start at the earliest offset so
// nothing produced before the first start is missed.
func Group(group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.SessionTimeout(10 * time.Second),
		kgo.HeartbeatInterval(1 * time.Second),
		kgo.RebalanceTimeout(20 * time.Second),
	}
}

// TopicSpec describes topics to create.
type TopicSpec struct {
	Names      []string
	Partitions int32
	// Replication defaults to the broker default (-1).
	Replication int16
	// MinInsync sets min.insync.replicas; zero keeps the broker default.
	MinInsync int
	// Retention sets retention.ms; zero keeps the broker default.
	Retention time.Duration
}

// EnsureTopics creates the topics that do not exist yet. Existing topics are
// left as they are; [CheckDurability] tells whether they are safe.
func EnsureTopics(ctx context.Context, cl *kgo.Client, spec TopicSpec) error {
	adm := kadm.NewClient(cl)
	repl := spec.Replication
	if repl == 0 {
		repl = -1
	}
	configs := map[string]*string{}
	if spec.Retention > 0 {
		ms := strconv.FormatInt(spec.Retention.Milliseconds(), 10)
		configs["retention.ms"] = &ms
	}
	if spec.MinInsync > 0 {
		n := strconv.Itoa(spec.MinInsync)
		configs["min.insync.replicas"] = &n
	}
	resp, err := adm.CreateTopics(ctx, spec.Partitions, repl, configs, spec.Names...)
	if err != nil {
		return fmt.Errorf("kafkax: create topics: %w", err)
	}
	for _, r := range resp.Sorted() {
		switch {
		case r.Err == nil, errors.Is(r.Err, kerr.TopicAlreadyExists):
		case errors.Is(r.Err, kerr.InvalidReplicationFactor):
			return fmt.Errorf("kafkax: create topic %s with replication factor %d: the cluster has fewer brokers; "+
				"lower FERRY_TOPIC_REPLICATION (and FERRY_TOPIC_MIN_INSYNC) or add brokers: %w", r.Topic, spec.Replication, r.Err)
		default:
			return fmt.Errorf("kafkax: create topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// Ping checks the brokers answer a metadata request.
func Ping(ctx context.Context, cl *kgo.Client) error {
	return cl.Ping(ctx)
}
