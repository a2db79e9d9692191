package groupcommit

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkOpenLoop measures the wait the group commit adds at a steady
// arrival rate: requests arrive every millisecond (open loop, like the
// bench's latency workload at 1k/s), each produce takes roundTrip (a loaded
// broker); a request's time is its whole Produce call. With one
// produce in flight a request waits for the produce under way, then its own
// (about 1.5 round trips on average); with more slots it waits only while
// all are busy. Reports p50/p99 µs and produce calls per request (what the
// wait is traded for). Run with
//
//	go test -run '^$' -bench BenchmarkOpenLoop ./services/api/internal/groupcommit
func BenchmarkOpenLoop(b *testing.B) {
	const roundTrip = 4 * time.Millisecond
	for _, inflight := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			benchOpenLoop(b, inflight, roundTrip, time.Millisecond, 2000)
		})
	}
}

func benchOpenLoop(b *testing.B, inflight int, roundTrip, every time.Duration, n int) {
	var produces atomic.Int64
	produce := func(_ context.Context, recs ...*kgo.Record) kgo.ProduceResults {
		produces.Add(1)
		time.Sleep(roundTrip)
		out := make(kgo.ProduceResults, len(recs))
		for i, r := range recs {
			out[i] = kgo.ProduceResult{Record: r}
		}
		return out
	}
	var lat []time.Duration
	for range b.N {
		c := New(produce, time.Minute, inflight)
		lat = append(lat, openLoop(c, every, n)...)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	reqs := float64(b.N * n)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(produces.Load())/reqs, "produces/req")
}

// openLoop sends n one-record requests to c, one every interval on a fixed
// schedule, and returns each one's time in Produce.
func openLoop(c *Committer, every time.Duration, n int) []time.Duration {
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		time.Sleep(time.Until(t0.Add(time.Duration(i) * every)))
		wg.Go(func() {
			start := time.Now()
			c.Produce(context.Background(), &kgo.Record{Topic: "t"})
			lat[i] = time.Since(start)
		})
	}
	wg.Wait()
	return lat
}
