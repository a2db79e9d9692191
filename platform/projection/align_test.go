package projection

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var alignT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// part is one partition of a poll: its records' times (seconds after
// alignT0) from offset from, and its high watermark.
type part struct {
	topic     string
	from, hwm int64
	secs      []int
}

func poll(parts ...part) kgo.Fetches {
	var f kgo.Fetch
	for _, p := range parts {
		fp := kgo.FetchPartition{Partition: 0, HighWatermark: p.hwm}
		for i, s := range p.secs {
			fp.Records = append(fp.Records, &kgo.Record{Topic: p.topic, Offset: p.from + int64(i), Timestamp: alignT0.Add(time.Duration(s) * time.Second)})
		}
		f.Topics = append(f.Topics, kgo.FetchTopic{Topic: p.topic, Partitions: []kgo.FetchPartition{fp}})
	}
	return kgo.Fetches{f}
}

// names are records as topic@offset.
func names(recs []*kgo.Record) string {
	var s []string
	for _, r := range recs {
		s = append(s, fmt.Sprintf("%s@%d", r.Topic, r.Offset))
	}
	return strings.Join(s, " ")
}

func fixedAligner(hold time.Duration) (*aligner, *time.Time) {
	a := newAligner(hold, 1)
	now := alignT0
	a.now = func() time.Time { return now }
	return a, &now
}

// Caught-up partitions impose nothing: every record goes out at once,
// ordered by time across partitions.
func TestAlignerPassesCaughtUpPolls(t *testing.T) {
	a, _ := fixedAligner(time.Second)
	got := a.take(poll(part{"enq", 0, 2, []int{1, 5}}, part{"start", 0, 3, []int{2, 3, 9}}))
	if names(got) != "enq@0 start@0 start@1 enq@1 start@2" { // in time across partitions
		t.Fatalf("got %s", names(got))
	}
	if _, ok := a.holding(); ok {
		t.Fatal("holding records of caught-up partitions")
	}
}

// A topic behind on a backlog bounds the others: a record later than its
// newest waits (and so does everything after it in its partition) until
// that topic's next poll passes it; the partitions held are the ones to
// pause, and are resumed once released.
func TestAlignerHoldsWhatRanAheadOfATopicBehind(t *testing.T) {
	a, _ := fixedAligner(time.Second)
	// enq is behind (offsets 0-1 of 10) at second 2; start's second record
	// (second 3) ran ahead of it, and its third (second 1) waits behind it.
	got := a.take(poll(part{"enq", 0, 10, []int{1, 2}}, part{"start", 0, 3, []int{1, 3, 1}}))
	if names(got) != "enq@0 start@0 enq@1" {
		t.Fatalf("first poll gave %s", names(got))
	}
	if st := a.parts[topicPartition{"start", 0}]; st.held != 2 {
		t.Fatalf("start holds %d records, want 2", st.held)
	}
	if st := a.parts[topicPartition{"enq", 0}]; st.held != 0 {
		t.Fatalf("enq holds %d records, want 0", st.held)
	}
	// enq's next poll reaches second 4, still behind: start's held records
	// (seconds 3 and 1) go out in their partition's order, merged in time
	// with enq's.
	got = a.take(poll(part{"enq", 2, 10, []int{3, 4}}))
	if names(got) != "start@1 start@2 enq@2 enq@3" {
		t.Fatalf("second poll gave %s", names(got))
	}
	if _, ok := a.holding(); ok {
		t.Fatal("still holding after the frontier passed every held record")
	}
}

// pace pauses exactly the partitions held and resumes them once released;
// forget drops a revoked partition's held records.
func TestAlignerPacesAndForgets(t *testing.T) {
	a, _ := fixedAligner(time.Second)
	a.take(poll(part{"enq", 0, 10, []int{1}}, part{"start", 0, 5, []int{5, 6}}))
	var paused []string
	for tp, st := range a.parts {
		if st.held > 0 {
			paused = append(paused, tp.topic)
		}
	}
	if !slices.Equal(paused, []string{"start"}) {
		t.Fatalf("held partitions %v, want [start]", paused)
	}
	a.forget(nil, map[string][]int32{"start": {0}})
	if _, ok := a.holding(); ok || a.parts[topicPartition{"start", 0}] != nil {
		t.Fatal("a revoked partition's records are still held")
	}
	if got := a.take(poll(part{"start", 0, 5, []int{5, 6}})); names(got) != "" {
		// enq (behind at second 1) still bounds start after the rebalance.
		t.Fatalf("re-read start records went out ahead of enq: %s", names(got))
	}
}

// No record waits longer than maxHold, even when the partition behind is
// never read again.
func TestAlignerReleasesWhatWaitedTooLong(t *testing.T) {
	a, now := fixedAligner(100 * time.Millisecond)
	if got := a.take(poll(part{"enq", 0, 10, []int{1}}, part{"start", 0, 1, []int{5}})); names(got) != "enq@0" {
		t.Fatalf("first poll gave %s", names(got))
	}
	*now = now.Add(60 * time.Millisecond)
	if d, ok := a.holding(); !ok || d != 40*time.Millisecond {
		t.Fatalf("holding = %v, %v; want 40ms, true", d, ok)
	}
	if got := a.take(poll()); names(got) != "" {
		t.Fatalf("released %s before maxHold", names(got))
	}
	*now = now.Add(40 * time.Millisecond)
	if got := a.take(poll()); names(got) != "start@0" {
		t.Fatalf("after maxHold got %q, want start@0", names(got))
	}
}
