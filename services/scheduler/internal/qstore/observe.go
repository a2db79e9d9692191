package qstore

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed gauges.lua
	gaugesSrc    string
	gaugesScript = redis.NewScript(gaugesSrc)
)

// QueueDepth is the state of one queue at a Gauges snapshot.
type QueueDepth struct {
	Pool, Queue    string
	Ready, Delayed int64
	// OldestReady is the ready time of the ready job waiting longest (zero
	// when the queue has none).
	OldestReady time.Time
}

// Running counts the jobs in flight of one (pool, queue, tenant).
type Running struct {
	Pool, Queue, Tenant string
	Jobs                int64
}

// Gauges reads the queue depths of pools and the jobs in flight (the first
// maxInflight of each pool) in one read-only script call: per queue two
// ZCARDs and, for the oldest ready age, the first job of each priority band.
func (s *Store) Gauges(ctx context.Context, pools []string, maxInflight int) ([]QueueDepth, []Running, error) {
	args := make([]any, 0, 2+len(pools))
	args = append(args, s.opts.Prefix, maxInflight)
	for _, p := range pools {
		args = append(args, p)
	}
	v, err := gaugesScript.Run(ctx, s.rdb, nil, args...).Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("qstore: gauges: %w", err)
	}
	if len(v) != 2 {
		return nil, nil, fmt.Errorf("qstore: gauges: malformed reply")
	}
	qs, _ := v[0].([]any)
	rs, _ := v[1].([]any)
	var depths []QueueDepth
	for i := 0; i+5 <= len(qs); {
		d := QueueDepth{Pool: str(qs[i]), Queue: str(qs[i+1])}
		d.Ready, _ = qs[i+2].(int64)
		d.Delayed, _ = qs[i+3].(int64)
		n, _ := qs[i+4].(int64)
		i += 5
		for k := int64(0); k < n && i < len(qs); k++ {
			if t, err := time.Parse(time.RFC3339Nano, str(qs[i])); err == nil && (d.OldestReady.IsZero() || t.Before(d.OldestReady)) {
				d.OldestReady = t
			}
			i++
		}
		depths = append(depths, d)
	}
	var running []Running
	for i := 0; i+4 <= len(rs); i += 4 {
		n, _ := rs[i+3].(int64)
		running = append(running, Running{Pool: str(rs[i]), Queue: str(rs[i+1]), Tenant: str(rs[i+2]), Jobs: n})
	}
	return depths, running, nil
}
