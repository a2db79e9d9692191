package kafkax

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// LagMetric is the name of the consumer lag gauge: records not yet
// processed by a consumer group, per group and topic (summed over
// partitions). It follows the OpenTelemetry messaging conventions'
// messaging.kafka.consumer.lag in meaning, under Ferry's namespace.
const LagMetric = "ferry.kafka.consumer.lag"

// LagInterval is how often WatchLag polls. Defaults to 5s.
var LagInterval = 5 * time.Second

// CommittedFunc returns, per topic and partition, the next offset a group
// will process. Projections keep it in Postgres, not in Kafka.
type CommittedFunc func(ctx context.Context) (map[string]map[int32]int64, error)

// WatchLag polls the lag of group on topics every LagInterval until ctx is
// done and reports it as the gauge ferry.kafka.consumer.lag{group,topic}.
// With committed nil the group's offsets committed in Kafka are used
// (kadm Lag); otherwise committed says where the group is, and the lag is
// measured against the topics' end offsets (a partition never processed
// counts from its start). It blocks; run it beside the consumer it watches,
// with that consumer's client.
func WatchLag(ctx context.Context, cl *kgo.Client, group string, topics []string, committed CommittedFunc) {
	lags.register()
	defer lags.forget(group)
	adm := kadm.NewClient(cl)
	t := time.NewTicker(LagInterval)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, LagInterval)
		per, err := groupLag(qctx, adm, group, topics, committed)
		cancel()
		if err == nil {
			lags.set(group, per)
		} else if ctx.Err() == nil {
			slog.Debug("consumer lag", "group", group, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func groupLag(ctx context.Context, adm *kadm.Client, group string, topics []string, committed CommittedFunc) (map[string]int64, error) {
	per := make(map[string]int64, len(topics))
	for _, t := range topics {
		per[t] = 0
	}
	if committed == nil {
		ls, err := adm.Lag(ctx, group)
		if err != nil {
			return nil, err
		}
		l, ok := ls[group]
		if !ok {
			return per, nil
		}
		if err := l.Error(); errors.Is(err, kerr.GroupIDNotFound) {
			// Not joined yet: nothing is processed.
			return groupLag(ctx, adm, group, topics, func(context.Context) (map[string]map[int32]int64, error) { return nil, nil })
		} else if err != nil {
			return nil, err
		}
		for t, ps := range l.Lag {
			for _, p := range ps {
				if p.Lag > 0 {
					per[t] += p.Lag
				}
			}
		}
		return per, nil
	}
	at, err := committed(ctx)
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	for t, ps := range Unprocessed(ends, starts, at) {
		for _, n := range ps {
			per[t] += n
		}
	}
	return per, nil
}

// Unprocessed returns, per topic and partition listed in ends, the records
// a consumer whose next offsets are at has not processed yet (only
// partitions with some). A partition at has no offset for counts from its
// start offset in starts: records that expired before the consumer ever
// read there are none it can still process.
func Unprocessed(ends, starts kadm.ListedOffsets, at map[string]map[int32]int64) map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		from, ok := at[o.Topic][o.Partition]
		if !ok {
			if s, found := starts.Lookup(o.Topic, o.Partition); found && s.Err == nil {
				from = s.Offset
			}
		}
		if d := o.Offset - from; d > 0 {
			if out[o.Topic] == nil {
				out[o.Topic] = map[int32]int64{}
			}
			out[o.Topic][o.Partition] = d
		}
	})
	return out
}

// lagRegistry is the process-wide state behind the lag gauge.
type lagRegistry struct {
	once sync.Once
	mu   sync.Mutex
	// by group, then topic
	lag   map[string]map[string]int64
	attrs map[[2]string]metric.ObserveOption
}

var lags = &lagRegistry{lag: map[string]map[string]int64{}, attrs: map[[2]string]metric.ObserveOption{}}

func (r *lagRegistry) register() {
	r.once.Do(func() {
		_, err := otel.Meter("ferry/kafkax").Int64ObservableGauge(LagMetric,
			metric.WithDescription("Records of a topic the consumer group has not processed yet (end offset − next offset to process, summed over partitions), polled every 5s."),
			metric.WithUnit("{message}"),
			metric.WithInt64Callback(r.observe))
		if err != nil {
			otel.Handle(err)
		}
	})
}

func (r *lagRegistry) observe(_ context.Context, o metric.Int64Observer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for g, per := range r.lag {
		for t, n := range per {
			k := [2]string{g, t}
			a, ok := r.attrs[k]
			if !ok {
				a = metric.WithAttributes(attribute.String("group", g), attribute.String("topic", t))
				r.attrs[k] = a
			}
			o.Observe(n, a)
		}
	}
	return nil
}

func (r *lagRegistry) set(group string, per map[string]int64) {
	r.mu.Lock()
	r.lag[group] = per
	r.mu.Unlock()
}

func (r *lagRegistry) forget(group string) {
	r.mu.Lock()
	delete(r.lag, group)
	r.mu.Unlock()
}
