package qstore

// Type-aware routing. Workers announce, with their slots, the job types they
// have handlers for and the dispatch partitions they own
// (schema.WorkerRouting); Batch.Worker stores that per worker. Each
// dispatch step (route.lua) builds from the live workers' announcements the
// partitions that take each type, and:
//
//   - pops a job only when a live worker handles its type, and returns with
//     it the partition to produce its dispatch to: one owned by such a
//     worker, chosen by a hash of the job id so every dispatch of a job
//     reaches the same worker (Template.Partition; -1 when only workers without
//     routing, from before it, take the type: the job id's hash decides);
//   - parks a popped job whose type no live worker takes: it leaves the
//     ready sets, so the jobs behind it go on (no head-of-line blocking),
//     and keeps its ready score;
//   - releases parked jobs of every type a live worker now takes, back to
//     their old place (at most 1000 jobs parked or released per step);
//   - expires parked jobs whose not_after passed, as ready ones.
//
// A parked job is never dead-lettered for want of a worker: it waits until
// a worker for its type appears, it is cancelled or its not_after passes.
// A pool with no live worker at all dispatches nothing and parks nothing:
// its jobs wait ready, as before.
//
// Keys, under the prefix P, in addition to those of qstore.go and fair.go:
//
//	P pool:<pool>:wroute                    HASH worker id → routing JSON {types, partitions}
//	P pool:<pool>:rtable                    STRING the route table the live workers' routing makes (JSON {legacy, by: type → partitions}), kept until a worker comes, goes or changes it
//	P pool:<pool>:parked                    ZSET parked jobs by ready score
//	P pool:<pool>:parked:t:<type>           ZSET the parked jobs of a type, by ready score
//	P pool:<pool>:parked:na                 ZSET parked jobs with a not_after, by it (ms)
//	P pool:<pool>:q:<queue>:t:<tenant>:parked ZSET a tenant's parked jobs of a queue
//
// Job state "parked" is a ready job out of the dispatch path.

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/events/schema"
)

//go:embed route.lua
var routeSrc string

// routingArg encodes a worker's routing for the W operation: JSON with
// non-null arrays, or "" for a worker that announces none.
func routingArg(r *schema.WorkerRouting) string {
	if r == nil {
		return ""
	}
	v := struct {
		Types      []string `json:"types"`
		Partitions []int32  `json:"partitions"`
	}{Types: r.Types, Partitions: r.Partitions}
	if v.Types == nil {
		v.Types = []string{}
	}
	if v.Partitions == nil {
		v.Partitions = []int32{}
	}
	b, _ := json.Marshal(v) // strings and integers always encode
	return string(b)
}

// Unroutable counts the parked jobs of each pool: jobs whose type no live
// worker of their pool handles.
func (s *Store) Unroutable(ctx context.Context, pools []string) (map[string]int64, error) {
	cmds := make([]*redis.IntCmd, len(pools))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, pool := range pools {
			cmds[i] = p.ZCard(ctx, s.opts.Prefix+"pool:"+pool+":parked")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("qstore: unroutable: %w", err)
	}
	out := make(map[string]int64, len(pools))
	for i, pool := range pools {
		out[pool] = cmds[i].Val()
	}
	return out, nil
}

// fillUnroutable sets the Unroutable count of tenant's queues qs, summed
// over pools, in one pipelined round trip.
func (s *Store) fillUnroutable(ctx context.Context, tenant string, pools []string, qs []QueueState) error {
	if len(qs) == 0 {
		return nil
	}
	cmds := make([][]*redis.IntCmd, len(qs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range qs {
			for _, pool := range pools {
				cmds[i] = append(cmds[i], p.ZCard(ctx, s.opts.Prefix+"pool:"+pool+":q:"+q.Name+":t:"+tenant+":parked"))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("qstore: unroutable: %w", err)
	}
	for i := range qs {
		for _, c := range cmds[i] {
			qs[i].Unroutable += c.Val()
		}
	}
	return nil
}
