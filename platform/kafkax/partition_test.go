package kafkax

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A record marked with ToPartition lands on its partition on a real broker,
// whatever its key hashes to; an unmarked record with the same key and
// Partition field goes where its key hashes, every time.
func TestToPartitionIsHonoured(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := brokers(t, kfake.NumBrokers(1), kfake.DefaultNumPartitions(8))
	if err := EnsureTopics(ctx, cl, TopicSpec{Names: []string{"t"}, Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	key := []byte("job-1")
	hashed := int32(-1)
	for range 3 {
		r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: key, Partition: 7}).First()
		if err != nil {
			t.Fatal(err)
		}
		if hashed >= 0 && r.Partition != hashed {
			t.Fatalf("unmarked record went to %d then %d: not by its key", hashed, r.Partition)
		}
		hashed = r.Partition
	}
	for p := range int32(8) {
		rec := &kgo.Record{Topic: "t", Key: key}
		ToPartition(rec, p)
		r, err := cl.ProduceSync(ctx, rec).First()
		if err != nil {
			t.Fatal(err)
		}
		if r.Partition != p {
			t.Errorf("ToPartition(%d): record landed on %d", p, r.Partition)
		}
	}
	rec := &kgo.Record{Topic: "t", Key: key}
	ToPartition(rec, 99) // beyond the topic: the key decides
	if r, err := cl.ProduceSync(ctx, rec).First(); err != nil || r.Partition != hashed {
		t.Errorf("ToPartition beyond the topic: partition %d (err %v), want the key's %d", r.Partition, err, hashed)
	}
}
