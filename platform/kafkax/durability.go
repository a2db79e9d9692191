package kafkax

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Durability is what a topic's settings guarantee for records produced with
// acks=all.
type Durability struct {
	Topic string
	// Replication is the smallest replica count among the topic's partitions.
	Replication int
	// MinInsync is min.insync.replicas: replicas that must have a record
	// before acks=all acknowledges it.
	MinInsync int
	// UncleanElection is unclean.leader.election.enable: an out-of-sync
	// replica may become leader.
	UncleanElection bool
}

// The rule Ferry applies to its topics. A record acknowledged under acks=all
// is on min.insync.replicas replicas, so it survives the loss of any one
// broker if and only if min.insync.replicas ≥ 2 (which needs a replication
// factor ≥ 2) and no out-of-sync replica may be elected leader. Replication
// factor 2 with min.insync.replicas 2 keeps every record but refuses writes
// while one broker is down; 3 and 2 (the default) keeps both.

// LossRisks returns why an acknowledged record of the topic could be lost,
// or every write refused, when one broker fails; each says what to change.
// Empty when the topic is safe.
func (d Durability) LossRisks() []string {
	var out []string
	if d.Replication < 2 {
		out = append(out, fmt.Sprintf("replication factor %d (want ≥ 2, 3 recommended): one broker holds every copy; "+
			"add replicas with kafka-reassign-partitions.sh, or delete the topic while it is empty and let Ferry recreate it with FERRY_TOPIC_REPLICATION=3", d.Replication))
	}
	if d.MinInsync < 2 {
		out = append(out, fmt.Sprintf("min.insync.replicas %d (want 2): acks=all is acknowledged by the leader alone when its followers lag; "+
			"kafka-configs.sh --alter --entity-type topics --entity-name <topic> --add-config min.insync.replicas=2", d.MinInsync))
	}
	if d.MinInsync > d.Replication {
		out = append(out, fmt.Sprintf("min.insync.replicas %d > replication factor %d: every acks=all write is refused; "+
			"lower min.insync.replicas to %d or add replicas", d.MinInsync, d.Replication, max(d.Replication, 1)))
	}
	if d.UncleanElection {
		out = append(out, "unclean.leader.election.enable=true: an out-of-sync replica may become leader and drop acknowledged records; "+
			"kafka-configs.sh --alter --entity-type topics --entity-name <topic> --add-config unclean.leader.election.enable=false")
	}
	return out
}

// AvailabilityRisk says when one broker failure refuses writes to a topic
// that keeps every acknowledged record ("" otherwise): worth a warning, not
// a refusal.
func (d Durability) AvailabilityRisk() string {
	if len(d.LossRisks()) == 0 && d.MinInsync >= d.Replication {
		return fmt.Sprintf("replication factor %d = min.insync.replicas %d: one broker down refuses writes; a replication factor of %d keeps writing",
			d.Replication, d.MinInsync, d.MinInsync+1)
	}
	return ""
}

// DescribeDurability reads the replication factor (metadata) and
// min.insync.replicas and unclean.leader.election.enable (describe configs)
// of topics.
func DescribeDurability(ctx context.Context, cl *kgo.Client, topics ...string) ([]Durability, error) {
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("kafkax: describe topics: %w", err)
	}
	configs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("kafkax: describe topic configs (the client needs DescribeConfigs on Ferry's topics): %w", err)
	}
	out := make([]Durability, 0, len(topics))
	for _, t := range topics {
		td, ok := details[t]
		if !ok || td.Err != nil {
			return nil, fmt.Errorf("kafkax: describe topic %s: %w", t, errors.Join(td.Err, errMissing(ok)))
		}
		d := Durability{Topic: t, Replication: minReplicas(td.Partitions)}
		rc, err := configs.On(t, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return nil, fmt.Errorf("kafkax: describe configs of topic %s: %w", t, err)
		}
		if d.MinInsync, err = applyConfigs(&d, rc.Configs); err != nil {
			return nil, fmt.Errorf("kafkax: topic %s: %w", t, err)
		}
		out = append(out, d)
	}
	return out, nil
}

func errMissing(found bool) error {
	if found {
		return nil
	}
	return errors.New("not in the metadata answer")
}

// minReplicas is the smallest replica count of any partition.
func minReplicas(ps kadm.PartitionDetails) int {
	n := -1
	for _, p := range ps {
		if n < 0 || len(p.Replicas) < n {
			n = len(p.Replicas)
		}
	}
	return max(n, 0)
}

// applyConfigs sets d's unclean election from configs and returns
// min.insync.replicas (Kafka's default 1 when the broker does not say).
func applyConfigs(d *Durability, configs []kadm.Config) (int, error) {
	minInsync := 1
	for _, c := range configs {
		switch c.Key {
		case "min.insync.replicas":
			n, err := strconv.Atoi(c.MaybeValue())
			if err != nil {
				return 0, fmt.Errorf("min.insync.replicas %q: %w", c.MaybeValue(), err)
			}
			minInsync = n
		case "unclean.leader.election.enable":
			d.UncleanElection = c.MaybeValue() == "true"
		}
	}
	return minInsync, nil
}

// CheckDurability describes topics and judges them by [Durability.LossRisks].
// In production (refuse) any risk is an error listing what to change per
// topic; otherwise risks are logged as one warning. Availability risks are
// always only logged.
func CheckDurability(ctx context.Context, cl *kgo.Client, topics []string, refuse bool, log *slog.Logger) error {
	ds, err := DescribeDurability(ctx, cl, topics...)
	if err != nil {
		return err
	}
	return judgeDurability(ds, refuse, log)
}

// judgeDurability is CheckDurability's decision on described topics.
func judgeDurability(ds []Durability, refuse bool, log *slog.Logger) error {
	risks := groupByProblem(ds, Durability.LossRisks)
	if len(risks) > 0 {
		if refuse {
			return fmt.Errorf("kafka: FERRY_ENV=production refuses topics that could lose acknowledged records or refuse every write when one broker fails:\n%s", risks)
		}
		log.Warn("Kafka topics could lose acknowledged records when one broker fails (FERRY_ENV=production refuses to start on them)", "problems", risks.String())
	}
	if avail := groupByProblem(ds, func(d Durability) []string { return nonEmpty(d.AvailabilityRisk()) }); len(avail) > 0 {
		log.Warn("Kafka topics keep acknowledged records but refuse writes while one broker is down", "problems", avail.String())
	}
	return nil
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// problems maps a problem to the topics that have it, so sixteen topics
// created alike give one line each problem, not sixteen.
type problems map[string][]string

func groupByProblem(ds []Durability, risks func(Durability) []string) problems {
	out := problems{}
	for _, d := range ds {
		for _, r := range risks(d) {
			out[r] = append(out[r], d.Topic)
		}
	}
	return out
}

func (p problems) String() string {
	var lines []string
	for problem, topics := range p {
		lines = append(lines, "  "+strings.Join(topics, ", ")+": "+problem)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
