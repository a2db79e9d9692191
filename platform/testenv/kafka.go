package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/devstack"
)

// Kafka starts an embedded Kafka broker (kfake) for the calling test on a
// free port of 127.0.0.1, over real sockets, and returns its address for
// kgo.SeedBrokers or FERRY_KAFKA_BROKERS. The broker keeps everything in
// memory, creates a topic a client asks for when the client allows auto
// creation, and is stopped when the test ends.
func Kafka(t testing.TB) (brokers string) {
	t.Helper()
	return KafkaBroker(t).Addr()
}

// KafkaBroker is [Kafka] for a test that also steers the broker: its
// Cluster takes control functions that answer requests in its place
// (refused produces, slow fetches).
func KafkaBroker(t testing.TB) *devstack.Kafka {
	t.Helper()
	k, err := devstack.StartKafka(devstack.KafkaConfig{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := k.Stop(ctx); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return k
}
