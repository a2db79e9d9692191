package api_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api"
)

// refuseProduces makes the broker answer every produce with a
// non-retriable error while refusing is set, as a broker that lost its
// topic's authorization or its disk would.
func refuseProduces(k *devstack.Kafka, refusing *atomic.Bool) {
	cl := k.Cluster()
	cl.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cl.KeepControl()
		if !refusing.Load() {
			return nil, nil, false
		}
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
}

// TestProduceRefusedRollsBack: while Kafka refuses the enqueued records, a
// submission answers 503 unavailable and nothing of it stays behind: no
// job is readable, its Idempotency-Key and unique key do not block a retry
// once their lease has passed, and the retry creates exactly one job.
// Other tenants' submissions work again as soon as Kafka does.
func TestProduceRefusedRollsBack(t *testing.T) {
	c := testenv.Common(t, api.Needs)
	broker := testenv.KafkaBroker(t)
	c.KafkaBrokers = []string{broker.Addr()}
	deps := testenv.Open(t, c, api.Needs)
	b := &bundle{brokers: broker.Addr(), deps: deps}
	b.keyA, b.keyB = testenv.Tenant(t, deps.Postgres, "acme"), testenv.Tenant(t, deps.Postgres, "globex")
	svc, err := api.New(t.Context(), deps, api.Config{IdempotencyClaimTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = testenv.Serve(t, deps, svc)
	testenv.Run(t, svc)

	var refusing atomic.Bool
	refusing.Store(true)
	refuseProduces(broker, &refusing)
	job := uniqueJob("report-1", "queued")
	r := b.do(t, b.keyA, "POST", "/v1/jobs", job, "Idempotency-Key", "idem-1")
	wantUnavailable(t, "a submission Kafka refuses", r)
	batch := b.do(t, b.keyB, "POST", "/v1/jobs/batch", map[string]any{"jobs": []any{
		map[string]any{"type": "noop"}, map[string]any{"type": "noop"}}})
	if e, _ := batch.Body["error"].(map[string]any); batch.Status != http.StatusServiceUnavailable || e["code"] != "batch_rejected" {
		t.Fatalf("a batch Kafka refuses: %d %s, want 503 batch_rejected", batch.Status, batch.Raw)
	}
	for i, it := range batch.Body["jobs"].([]any) {
		if e, _ := it.(map[string]any)["error"].(map[string]any); e["code"] != "unavailable" {
			t.Errorf("batch item %d: %v, want unavailable", i, it)
		}
	}
	b.projected(t, b.keyA, 0)
	b.projected(t, b.keyB, 0)

	refusing.Store(false)
	if r := b.do(t, b.keyB, "POST", "/v1/jobs", map[string]any{"type": "noop"}); r.Status != http.StatusAccepted {
		t.Fatalf("another tenant once Kafka accepts again: %d %s", r.Status, r.Raw)
	}
	var id string
	eventually(t, func() error { // the keys' leases (1 s) pass
		r := b.do(t, b.keyA, "POST", "/v1/jobs", job, "Idempotency-Key", "idem-1")
		if r.Status != http.StatusAccepted {
			return &retryStatus{r.Status, string(r.Raw)}
		}
		id = r.Body["id"].(string)
		return nil
	})
	wantDedup(t, "the retry's replay", b.do(t, b.keyA, "POST", "/v1/jobs", job, "Idempotency-Key", "idem-1"), id)
	wantDedup(t, "the unique key after the retry", b.do(t, b.keyA, "POST", "/v1/jobs", job), id)
	b.projected(t, b.keyA, 1)
	if n := b.endOffsets(t, "ferry.jobs.enqueued"); n != 2 {
		t.Fatalf("%d enqueued records, want 2 (the other tenant's job and the retry's)", n)
	}
}

// endOffsets is how many records topic holds, summed over its partitions.
func (b *bundle) endOffsets(t *testing.T, topic string) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), topic)
	if err != nil || ends.Error() != nil {
		t.Fatalf("end offsets of %s: %v %v", topic, err, ends.Error())
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// wantUnavailable checks r is 503 with the stable code unavailable.
func wantUnavailable(t *testing.T, what string, r resp) {
	t.Helper()
	e, _ := r.Body["error"].(map[string]any)
	if r.Status != http.StatusServiceUnavailable || e["code"] != "unavailable" {
		t.Fatalf("%s: %d %s, want 503 unavailable", what, r.Status, r.Raw)
	}
}

// retryStatus is a status an eventually-loop waits to change.
type retryStatus struct {
	status int
	body   string
}

func (e *retryStatus) Error() string { return http.StatusText(e.status) + ": " + e.body }
