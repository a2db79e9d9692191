package kafkax

import (
	"errors"
	"maps"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestUnprocessed: a partition counts what lies between the consumer's next
// offset and the end; one the consumer never stored counts from its start
// (records that expired first are not owed); one listed with an error, or
// caught up, or ahead (a stored offset past a truncated end), counts none.
func TestUnprocessed(t *testing.T) {
	listed := func(offs map[int32]int64) kadm.ListedOffsets {
		out := kadm.ListedOffsets{"t": {}}
		for p, o := range offs {
			out["t"][p] = kadm.ListedOffset{Topic: "t", Partition: p, Offset: o}
		}
		return out
	}
	ends := listed(map[int32]int64{0: 10, 1: 10, 2: 10, 3: 10, 4: 10, 5: 0})
	ends["t"][6] = kadm.ListedOffset{Topic: "t", Partition: 6, Offset: 99, Err: errors.New("not leader")}
	starts := listed(map[int32]int64{0: 0, 1: 0, 2: 4, 3: 10, 4: 0, 5: 0})
	at := map[string]map[int32]int64{"t": {0: 7, 1: 10, 4: 12}}
	got := Unprocessed(ends, starts, at)["t"]
	want := map[int32]int64{0: 3, 2: 6}
	if !maps.Equal(got, want) {
		t.Fatalf("Unprocessed = %v, want %v", got, want)
	}
}
