package kafkax

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// RequestsMetric counts the requests a client wrote to the brokers, per
// client and request kind (api: Produce, Fetch, OffsetCommit, Heartbeat, …).
// RequestBytesMetric counts their bytes, written and read back (direction).
// At small batches a job's cost is messages, not work (docs/performance.md,
// Round 21): these say how many of each kind a job costs.
const (
	RequestsMetric     = "ferry.kafka.requests"
	RequestBytesMetric = "ferry.kafka.request.bytes"
)

// requestCounts are one client's counters, indexed by request key. The
// broker hook only adds to atomics (a request costs a few nanoseconds more);
// the metrics are read from them when collected.
type requestCounts struct {
	client        string
	requests      [kmsg.MaxKey + 1]atomic.Int64
	written, read [kmsg.MaxKey + 1]atomic.Int64
}

var _ kgo.HookBrokerE2E = (*requestCounts)(nil)

// OnBrokerE2E counts a request once its response is read, or its write or
// read failed.
func (c *requestCounts) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key < 0 || int(key) > kmsg.MaxKey {
		return
	}
	c.requests[key].Add(1)
	c.written[key].Add(int64(e2e.BytesWritten))
	c.read[key].Add(int64(e2e.BytesRead))
}

// requestRegistry holds the counters of every client of the process: one per
// client id, shared by clients of the same id (a restarted consumer keeps
// counting where the last one stopped, as a counter must).
type requestRegistry struct {
	once    sync.Once
	mu      sync.Mutex
	clients map[string]*requestCounts
}

var requestStats = &requestRegistry{clients: map[string]*requestCounts{}}

// counts returns the counters of client id, registering the metrics on first
// use.
func (r *requestRegistry) counts(id string) *requestCounts {
	r.once.Do(func() {
		m := otel.Meter("ferry/kafkax")
		r.register(m)
		registerCodec(m)
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clients[id]
	if !ok {
		c = &requestCounts{client: id}
		r.clients[id] = c
	}
	return c
}

// register makes the counters observable through m.
func (r *requestRegistry) register(m metric.Meter) {
	reqs := observableCounter(m, RequestsMetric, "{request}",
		"Requests written to the Kafka brokers whose response was read (or that failed), per client and request kind (api).")
	bytes := observableCounter(m, RequestBytesMetric, "By",
		"Bytes of the Kafka requests (direction=write) and of their responses (direction=read), per client and request kind (api).")
	if reqs == nil || bytes == nil {
		return
	}
	_, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r.observe(o, reqs, bytes)
		return nil
	}, reqs, bytes)
	if err != nil {
		otel.Handle(err)
	}
}

// observableCounter creates an int64 observable counter on m, nil (the
// error handed to otel.Handle) when m refuses it.
func observableCounter(m metric.Meter, name, unit, description string) metric.Int64ObservableCounter {
	c, err := m.Int64ObservableCounter(name, metric.WithDescription(description), metric.WithUnit(unit))
	if err != nil {
		otel.Handle(err)
		return nil
	}
	return c
}

// observe reports every request kind a client has used.
func (r *requestRegistry) observe(o metric.Observer, reqs, bytes metric.Int64Observable) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.clients {
		for key := range c.requests {
			n := c.requests[key].Load()
			if n == 0 {
				continue
			}
			client, api := attribute.String("client", c.client), attribute.String("api", kmsg.NameForKey(int16(key)))
			o.ObserveInt64(reqs, n, metric.WithAttributes(client, api))
			o.ObserveInt64(bytes, c.written[key].Load(), metric.WithAttributes(client, api, attribute.String("direction", "write")))
			o.ObserveInt64(bytes, c.read[key].Load(), metric.WithAttributes(client, api, attribute.String("direction", "read")))
		}
	}
}
