package eventlog

import (
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/hub"
)

// BenchmarkAppend logs the lifecycle of 1,000 jobs (enqueued with a payload,
// started, completed) per op into a log of 50,000 events (the default
// FERRY_SSE_LOG_SIZE) that no client reads: what the sse-bridge costs per
// job at full load, when nearly every event is logged and never streamed.
func BenchmarkAppend(b *testing.B) {
	l := New(Config{Size: 50_000, Hold: time.Second}, hub.New(1000), slog.New(slog.NewTextHandler(io.Discard, nil)))
	const jobs = 1000
	at := time.Now().UTC()
	batch := func(round int) []*kgo.Record {
		recs := make([]*kgo.Record, 0, 3*jobs)
		for i := range jobs {
			r := ref("0192a3b4-c5d6-7e8f-"+strconv.Itoa(round)+"-"+strconv.Itoa(i), "acme", 1)
			for _, d := range []schema.Data{
				schema.Enqueued{JobRef: r, Job: schema.JobSpec{Type: "email", Queue: "default", Priority: 5, MaxAttempts: 3, Pool: "short",
					Payload: []byte(`{"to":"someone@example.com","subject":"Your receipt","template":"receipt-v2"}`)},
					CreatedAt: at, RunAt: at, Reason: schema.ReasonSubmitted},
				schema.Started{JobRef: r, WorkerID: "worker-1", DispatchID: "d-" + strconv.Itoa(i), StartedAt: at},
				schema.Completed{JobRef: r, WorkerID: "worker-1", DispatchID: "d-" + strconv.Itoa(i), StartedAt: at, FinishedAt: at},
			} {
				rec, err := schema.NewRecord(schema.Topics{}.Lifecycle(d.(schema.Lifecycle).EventType()), "bench", d)
				if err != nil {
					b.Fatal(err)
				}
				recs = append(recs, rec)
			}
		}
		return recs
	}
	rounds := make([][]*kgo.Record, 64)
	for i := range rounds {
		rounds[i] = batch(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// Records of a round already logged are dropped as duplicates by
		// CloudEvents id, so each op gets a fresh copy of its round's ids.
		if i > 0 && i%len(rounds) == 0 {
			b.StopTimer()
			for j := range rounds {
				rounds[j] = batch(i + j)
			}
			b.StartTimer()
		}
		l.Append(rounds[i%len(rounds)])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*jobs), "ns/job")
}
