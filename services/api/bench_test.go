package api_test

import (
	"context"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
)

// commandCounter counts the Redis commands a client sends (a pipeline
// counts each of its commands) and its round trips (a pipeline is one).
type commandCounter struct{ n, rtts atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); c.rtts.Add(1); return next(ctx, cmd) }
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		c.rtts.Add(1)
		return next(ctx, cmds)
	}
}

// produceCounter counts the Produce requests a Kafka client writes.
type produceCounter struct{ n atomic.Int64 }

func (c *produceCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil { // ApiKey 0: Produce
		c.n.Add(1)
	}
}

// BenchmarkSubmit measures POST /v1/jobs without Idempotency-Key over real
// HTTP, Redis, Postgres and the embedded broker, from 1 and from 32
// concurrent clients: the median latency of one call and the Redis
// commands and Kafka produce requests each submission costs. Run with
//
//	go test -run '^$' -bench BenchmarkSubmit -benchtime 2000x ./services/api
func BenchmarkSubmit(b *testing.B) {
	for _, clients := range []int{1, 32} {
		b.Run(map[int]string{1: "clients=1", 32: "clients=32"}[clients], func(b *testing.B) { benchSubmit(b, clients) })
	}
}

func benchSubmit(b *testing.B, clients int) {
	c := testenv.Common(b, api.Needs)
	deps := testenv.Open(b, c, api.Needs)
	rc, pc := &commandCounter{}, &produceCounter{}
	deps.Redis.AddHook(rc)
	kcl, err := kafkax.NewClient(deps.KafkaConfig("api-bench"), kgo.WithHooks(pc))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kcl.Close)
	deps.Kafka = kcl
	key := testenv.Tenant(b, deps.Postgres, "acme")
	svc, err := api.New(b.Context(), deps, api.Config{})
	if err != nil {
		b.Fatal(err)
	}
	srv := testenv.Serve(b, deps, svc)
	body := map[string]any{"type": "noop", "payload": map[string]any{"n": 1}}
	submit := func() time.Duration {
		start := time.Now()
		if r := testenv.Call(b, srv.URL, key, "POST", "/v1/jobs", body); r.Status != http.StatusAccepted {
			b.Fatalf("submit: %d %s", r.Status, r.Raw)
		}
		return time.Since(start)
	}
	for range 50 { // warm the caches and connections
		submit()
	}
	rc.n.Store(0)
	rc.rtts.Store(0)
	pc.n.Store(0)
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range clients {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				lat[i] = submit()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(rc.n.Load())/float64(b.N), "redis-cmds/op")
	b.ReportMetric(float64(rc.rtts.Load())/float64(b.N), "redis-rtts/op")
	b.ReportMetric(float64(pc.n.Load())/float64(b.N), "produce-reqs/op")
}
