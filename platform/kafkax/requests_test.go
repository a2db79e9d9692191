package kafkax

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/metrictest"
)

// TestRequestsCountedByKind: a client's produce and fetch requests are
// counted per kind, with the bytes written and read, under its client id,
// over a real socket to an in-process broker.
func TestRequestsCountedByKind(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	reader := sdkmetric.NewManualReader()
	reg := &requestRegistry{clients: map[string]*requestCounts{}}
	reg.once.Do(func() { reg.register(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test")) })

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.WithHooks(reg.counts("c1")),
		kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < 3; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("fetched %d of 3 records: %v", got, err)
		}
		got += fs.NumRecords()
	}

	reqs, written, read := collectRequests(t, reader, "c1")
	if reqs["Produce"] != 3 {
		t.Errorf("Produce requests %d, want 3 (one per synchronous produce); all %v", reqs["Produce"], reqs)
	}
	if reqs["Fetch"] < 1 || reqs["Metadata"] < 1 {
		t.Errorf("requests %v, want at least one Fetch and one Metadata", reqs)
	}
	if written["Produce"] <= 0 || read["Fetch"] <= 0 {
		t.Errorf("bytes written %v, read %v: want Produce's written and Fetch's read above 0", written, read)
	}
}

// collectRequests reads client's request and byte counters by api.
func collectRequests(t *testing.T, reader *sdkmetric.ManualReader, client string) (reqs, written, read map[string]int64) {
	t.Helper()
	reqs, written, read = map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, p := range metrictest.Int64Points(t, reader) {
		if p.Attr("client") != client {
			continue
		}
		switch api := p.Attr("api"); {
		case p.Name == RequestsMetric:
			reqs[api] = p.Value
		case p.Attr("direction") == "write":
			written[api] = p.Value
		default:
			read[api] = p.Value
		}
	}
	return reqs, written, read
}

// TestCodecCountsObserved: the codec metrics report schema's counts, by
// kind.
func TestCodecCountsObserved(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	registerCodec(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"))
	rec, err := schema.NewRecord("t", "ferry/api", schema.Started{JobRef: schema.JobRef{JobID: "job_1", TenantID: "t1", Attempt: 1},
		WorkerID: "w", DispatchID: "d", StartedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Decode(rec); err != nil {
		t.Fatal(err)
	}
	want := schema.Counts()
	got := map[string]int64{}
	for _, p := range metrictest.Int64Points(t, reader) {
		got[p.Name+" "+p.Attr("kind")] = p.Value
	}
	if got[DecodesMetric+" full"] != want.Decodes || got[DecodesMetric+" header"] != want.MetaDecodes ||
		got[EncodesMetric+" "] != want.Encodes || want.Decodes < 1 || want.Encodes < 1 {
		t.Fatalf("observed %v, want schema's counts %+v (at least one decode and one encode)", got, want)
	}
}
