package service_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/kafkax/kafkatest"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
)

var kafkaOnly = service.Needs{Kafka: true}

// common is the Kafka part of a service's settings.
func common(brokers []string) config.Common {
	return config.Common{KafkaBrokers: brokers, TopicPrefix: "ferry.", TopicPartitions: 2, TopicRetention: time.Hour}
}

func open(t *testing.T, c config.Common) (*service.Deps, string, error) {
	t.Helper()
	var logs testenv.LogBuffer
	d, err := service.Open(context.Background(), c, slog.New(slog.NewTextHandler(&logs, nil)), kafkaOnly)
	if d != nil {
		t.Cleanup(d.Close)
	}
	return d, logs.String(), err
}

// TestOpenCreatesDurableTopics: on three brokers, a production service
// creates its topics with the configured replication and min.insync.replicas
// and starts.
func TestOpenCreatesDurableTopics(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	c := common(cluster.ListenAddrs())
	c.Env, c.TopicReplication, c.TopicMinInsync = config.EnvProduction, 3, 2
	d, logs, err := open(t, c)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	ds, err := kafkax.DescribeDurability(context.Background(), d.Kafka, d.Topics.All()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ds {
		if x.Replication != 3 || x.MinInsync != 2 {
			t.Errorf("%s: replication %d, min.insync.replicas %d; want 3 and 2", x.Topic, x.Replication, x.MinInsync)
		}
	}
	if strings.Contains(logs, "level=WARN") {
		t.Errorf("safe topics logged a warning: %s", logs)
	}
}

// TestOpenGivesDispatchTopicsTheirOwnPartitions: the dispatch topics are
// created with DispatchPartitions (they bound a pool's workers), every other
// topic with TopicPartitions; DispatchPartitions 0 means TopicPartitions.
func TestOpenGivesDispatchTopicsTheirOwnPartitions(t *testing.T) {
	for _, tc := range []struct{ topics, dispatch, wantDispatch int }{{1, 8, 8}, {3, 0, 3}} {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cluster.Close)
		c := common(cluster.ListenAddrs())
		c.TopicPartitions, c.DispatchPartitions, c.TopicReplication, c.TopicMinInsync = tc.topics, tc.dispatch, 1, 1
		d, _, err := open(t, c)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		details, err := kadm.NewClient(d.Kafka).ListTopics(context.Background(), d.Topics.All()...)
		if err != nil {
			t.Fatal(err)
		}
		dispatch := d.Topics.DispatchTopics()
		for _, name := range d.Topics.All() {
			want := tc.topics
			if slices.Contains(dispatch, name) {
				want = tc.wantDispatch
			}
			if got := len(details[name].Partitions); got != want {
				t.Errorf("topics %d, dispatch %d: %s has %d partitions, want %d", tc.topics, tc.dispatch, name, got, want)
			}
		}
	}
}

// TestOpenRefusesUnsafeTopicsInProduction: on one broker (one copy of
// everything) production refuses to start, saying what to change;
// development starts with a warning.
func TestOpenRefusesUnsafeTopicsInProduction(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Stop(context.Background()) })
	c := common([]string{k.Addr()})
	c.TopicReplication, c.TopicMinInsync = 1, 1

	c.Env = config.EnvProduction
	_, _, err = open(t, c)
	if err == nil {
		t.Fatal("production started on topics with a single replica")
	}
	for _, want := range []string{"FERRY_ENV=production", "ferry.jobs.enqueued", "replication factor 1", "min.insync.replicas=2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	c.Env = config.EnvDevelopment
	_, logs, err := open(t, c)
	if err != nil {
		t.Fatalf("development refused to start: %v", err)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "replication factor 1") {
		t.Errorf("development logged no durability warning: %s", logs)
	}
}

// TestOpenWrongKafkaPassword: a service with a wrong password stops at
// start with an error naming the settings, within seconds.
func TestOpenWrongKafkaPassword(t *testing.T) {
	b := kafkatest.Start(t, kafkatest.Options{TLS: true, Users: []devstack.SASLUser{{Mechanism: "SCRAM-SHA-256", User: "ferry", Password: "right"}}})
	c := common([]string{b.Addr})
	c.KafkaSecurity = config.KafkaSecurity{TLS: true, TLSCAFile: b.CA.File, SASLMechanism: "SCRAM-SHA-256", SASLUsername: "ferry", SASLPassword: "wrong"}
	start := time.Now()
	_, _, err := open(t, c)
	if err == nil || !strings.Contains(err.Error(), "FERRY_KAFKA_SASL_PASSWORD") {
		t.Fatalf("got %v, want an error naming FERRY_KAFKA_SASL_PASSWORD", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s: a wrong password must stop the start at once", took)
	}

	c.KafkaSecurity.SASLPassword = "right"
	d, _, err := open(t, c)
	if err != nil {
		t.Fatalf("the right password: %v", err)
	}
	// Consumers get the same security settings as the shared producer.
	if got := d.KafkaConfig("worker").Security; got != c.KafkaSecurity {
		t.Errorf("KafkaConfig security %+v, want %+v", got, c.KafkaSecurity)
	}
}

// TestOpenWarnsOnInsecureSkipVerify: skipping certificate verification
// works but is logged at every start.
func TestOpenWarnsOnInsecureSkipVerify(t *testing.T) {
	b := kafkatest.Start(t, kafkatest.Options{TLS: true})
	c := common([]string{b.Addr})
	c.KafkaSecurity = config.KafkaSecurity{TLS: true, TLSInsecureSkipVerify: true}
	_, logs, err := open(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "FERRY_KAFKA_TLS_INSECURE_SKIP_VERIFY") {
		t.Errorf("no warning about FERRY_KAFKA_TLS_INSECURE_SKIP_VERIFY in %s", logs)
	}
}
