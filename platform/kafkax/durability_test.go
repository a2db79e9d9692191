package kafkax

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDurabilityRule is the rule of docs/operations.md, case by case.
func TestDurabilityRule(t *testing.T) {
	for _, tc := range []struct {
		d            Durability
		loss         []string // substrings of the loss risks, none when safe
		availability bool
	}{
		{Durability{Replication: 3, MinInsync: 2}, nil, false},
		{Durability{Replication: 5, MinInsync: 3}, nil, false},
		{Durability{Replication: 2, MinInsync: 2}, nil, true},
		{Durability{Replication: 3, MinInsync: 3}, nil, true},
		{Durability{Replication: 3, MinInsync: 1}, []string{"min.insync.replicas 1"}, false},
		{Durability{Replication: 1, MinInsync: 1}, []string{"replication factor 1", "min.insync.replicas 1"}, false},
		{Durability{Replication: 2, MinInsync: 1}, []string{"min.insync.replicas 1"}, false},
		{Durability{Replication: 2, MinInsync: 3}, []string{"min.insync.replicas 3 > replication factor 2"}, false},
		{Durability{Replication: 3, MinInsync: 2, UncleanElection: true}, []string{"unclean.leader.election.enable"}, false},
	} {
		risks := tc.d.LossRisks()
		if len(risks) != len(tc.loss) {
			t.Errorf("%+v: loss risks %q, want %d containing %q", tc.d, risks, len(tc.loss), tc.loss)
			continue
		}
		for i, want := range tc.loss {
			if !strings.Contains(risks[i], want) {
				t.Errorf("%+v: risk %q does not contain %q", tc.d, risks[i], want)
			}
		}
		if got := tc.d.AvailabilityRisk() != ""; got != tc.availability {
			t.Errorf("%+v: availability risk %q, want one: %v", tc.d, tc.d.AvailabilityRisk(), tc.availability)
		}
	}
}

func TestJudgeDurability(t *testing.T) {
	ds := []Durability{
		{Topic: "a", Replication: 3, MinInsync: 2},
		{Topic: "b", Replication: 1, MinInsync: 1},
		{Topic: "c", Replication: 1, MinInsync: 1},
		{Topic: "d", Replication: 2, MinInsync: 2},
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	err := judgeDurability(ds, true, log)
	if err == nil {
		t.Fatal("production accepted topics with one replica")
	}
	msg := err.Error()
	// One line per problem, naming the topics that have it and what to change.
	for _, want := range []string{"b, c: replication factor 1", "FERRY_TOPIC_REPLICATION=3", "b, c: min.insync.replicas 1", "min.insync.replicas=2"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	for _, line := range strings.Split(msg, "\n")[1:] {
		if topics, _, _ := strings.Cut(strings.TrimSpace(line), ":"); topics != "b, c" {
			t.Errorf("line %q names topics %q, want b, c (a and d lose nothing)", line, topics)
		}
	}

	logs.Reset()
	if err := judgeDurability(ds, false, log); err != nil {
		t.Fatalf("development refused: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "b, c: replication factor 1") || !strings.Contains(out, "d: replication factor 2 = min.insync.replicas 2") {
		t.Errorf("development logged %q, want warnings naming b, c and d", out)
	}

	logs.Reset()
	if err := judgeDurability([]Durability{ds[0], ds[3]}, true, log); err != nil {
		t.Fatalf("production refused topics that lose nothing: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, "d: replication factor 2") || strings.Contains(out, "a:") {
		t.Errorf("logged %q, want an availability warning for d alone", out)
	}
}

// threeBrokers starts a kfake cluster of three brokers and a client on it.
func threeBrokers(t *testing.T) *kgo.Client {
	t.Helper()
	return brokers(t, kfake.NumBrokers(3))
}

// brokers starts a kfake cluster with opts and a client on it.
func brokers(t *testing.T, opts ...kfake.Opt) *kgo.Client {
	t.Helper()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := NewClient(Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestTopicDurabilityOnBrokers creates topics on three brokers and checks
// what the brokers report: created with 3 and 2 they pass production; a
// topic created with one replica, or whose min.insync.replicas is lowered
// afterwards, stops it.
func TestTopicDurabilityOnBrokers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := threeBrokers(t)
	log := slog.New(slog.DiscardHandler)
	safe := []string{"ferry.jobs.enqueued", "ferry.jobs.completed"}
	if err := EnsureTopics(ctx, cl, TopicSpec{Names: safe, Partitions: 4, Replication: 3, MinInsync: 2}); err != nil {
		t.Fatal(err)
	}
	ds, err := DescribeDurability(ctx, cl, safe...)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Replication != 3 || d.MinInsync != 2 {
			t.Errorf("%s: replication %d, min.insync.replicas %d; want the 3 and 2 it was created with", d.Topic, d.Replication, d.MinInsync)
		}
	}
	if err := CheckDurability(ctx, cl, safe, true, log); err != nil {
		t.Fatalf("production refused topics created with 3 and 2: %v", err)
	}

	// Created elsewhere with a single replica and the broker's defaults.
	if err := EnsureTopics(ctx, cl, TopicSpec{Names: []string{"ferry.jobs.failed"}, Partitions: 4, Replication: 1}); err != nil {
		t.Fatal(err)
	}
	err = CheckDurability(ctx, cl, append(safe, "ferry.jobs.failed"), true, log)
	if err == nil || !strings.Contains(err.Error(), "ferry.jobs.failed: replication factor 1") || strings.Contains(err.Error(), "enqueued") {
		t.Fatalf("got %v, want a refusal naming ferry.jobs.failed alone", err)
	}

	// An operator lowers min.insync.replicas on a safe topic.
	one := "1"
	if _, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "min.insync.replicas", Value: &one}}, "ferry.jobs.completed"); err != nil {
		t.Fatal(err)
	}
	err = CheckDurability(ctx, cl, safe, true, log)
	if err == nil || !strings.Contains(err.Error(), "ferry.jobs.completed: min.insync.replicas 1") {
		t.Fatalf("got %v, want a refusal naming ferry.jobs.completed's min.insync.replicas", err)
	}
	if err := CheckDurability(ctx, cl, safe, false, log); err != nil {
		t.Fatalf("development refused: %v", err)
	}
}

func TestCreateTopicsWithMoreReplicasThanBrokers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := NewClient(Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = EnsureTopics(ctx, cl, TopicSpec{Names: []string{"t"}, Partitions: 1, Replication: 3, MinInsync: 2})
	if err == nil || !strings.Contains(err.Error(), "FERRY_TOPIC_REPLICATION") {
		t.Fatalf("got %v, want an error naming FERRY_TOPIC_REPLICATION", err)
	}
}

func TestDescribeDurabilityOfAMissingTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := threeBrokers(t)
	if _, err := DescribeDurability(ctx, cl, "nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("got %v, want an error naming the topic", err)
	}
}
