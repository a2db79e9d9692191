package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/services/api/internal/workers"
)

// Type-aware routing, the api's side: the api follows the workers topic
// (internal/workers) to say why a queued job waits (Job.Waiting) and,
// with FERRY_API_UNKNOWN_TYPES=reject, to refuse job types no worker
// announced lately.

// workerTTL is how long a worker counts as live after its announcement:
// the scheduler's (qstore) liveness, so the api's verdict matches its own.
const workerTTL = 5 * time.Second

// Values of FERRY_API_UNKNOWN_TYPES.
const (
	unknownTypesAccept = "accept"
	unknownTypesReject = "reject"
)

// CodeUnknownJobType answers a job type no worker of its pool announced
// within FERRY_API_KNOWN_TYPES_WINDOW (FERRY_API_UNKNOWN_TYPES=reject).
const CodeUnknownJobType = "unknown_job_type"

// withWaiting sets j.Waiting when j is queued but no live worker takes it.
func (s *Service) withWaiting(j Job) Job {
	if j.Status == schema.StatusQueued {
		j.Waiting = s.workers.Waiting(poolOf(j.Pool), j.Type, s.cfg.Now())
	}
	return j
}

// unknownType refuses spec when FERRY_API_UNKNOWN_TYPES=reject and no
// worker of its pool announced its type lately; nil otherwise.
func (s *Service) unknownType(spec schema.JobSpec) *httpx.Error {
	pool := poolOf(spec.Pool)
	if s.cfg.UnknownTypes != unknownTypesReject || s.workers.Known(pool, spec.Type, s.cfg.Now()) {
		return nil
	}
	e := httpx.Errorf(http.StatusUnprocessableEntity, CodeUnknownJobType,
		"no worker of pool %s announced job type %s in the last %s", pool, spec.Type, s.cfg.KnownTypesWindow)
	e.Fields = map[string]string{"type": "no worker handles it"}
	return e
}

// followWorkers feeds s.workers from the workers topic until ctx is done:
// from the announcements of the last KnownTypesWindow (the table is caught
// up once it read up to the end offsets listed at start), then live.
func (s *Service) followWorkers(ctx context.Context) {
	for ctx.Err() == nil {
		err := s.followWorkersOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("following the workers topic; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (s *Service) followWorkersOnce(ctx context.Context) error {
	topic := s.deps.Topics.Workers()
	from, behind, err := s.workerOffsets(ctx, topic)
	if err != nil {
		return err
	}
	cl, err := kafkax.NewClient(s.deps.KafkaConfig("api-workers"),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}), kgo.FetchMaxWait(250*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	s.readWorkers(ctx, cl, behind)
	return nil
}

// workerLookback is how many records before the window's first one each
// partition is read from too: older announcements change nothing (the
// table judges them by their time), and a timestamp lookup that answers
// too late an offset costs nothing then.
const workerLookback = 1000

// workerOffsets are the offsets to read the workers topic from (the
// window's first record, less workerLookback, never before the log start)
// and, per partition holding records from there, its end offset now.
// Explicit offsets only: a partition without records starts at its end as
// listed now, never at "the end" resolved later, which would skip what
// arrives meanwhile.
func (s *Service) workerOffsets(ctx context.Context, topic string) (map[int32]kgo.Offset, map[int32]int64, error) {
	adm := kadm.NewClient(s.deps.Kafka)
	since := s.cfg.Now().Add(-s.cfg.KnownTypesWindow).UnixMilli()
	var lists [3]kadm.ListedOffsets
	for i, list := range []func() (kadm.ListedOffsets, error){
		func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topic) },
		func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, since, topic) },
		func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, topic) },
	} {
		l, err := list()
		if err == nil {
			err = l.Error()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list offsets of %s: %w", topic, err)
		}
		lists[i] = l
	}
	starts, windowed, ends := lists[0], lists[1], lists[2]
	from, behind := map[int32]kgo.Offset{}, map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		at := e.Offset
		if w, ok := windowed.Lookup(topic, e.Partition); ok && w.Offset >= 0 && w.Offset < at {
			at = w.Offset
		}
		at = max(at-workerLookback, 0)
		if st, ok := starts.Lookup(topic, e.Partition); ok && st.Offset > at {
			at = st.Offset
		}
		if at < e.Offset {
			behind[e.Partition] = e.Offset
		}
		from[e.Partition] = kgo.NewOffset().At(at)
	})
	return from, behind, nil
}

// readWorkers polls announcements into s.workers until ctx is done; the
// table is caught up once every partition of behind reached its offset.
func (s *Service) readWorkers(ctx context.Context, cl *kgo.Client, behind map[int32]int64) {
	if len(behind) == 0 {
		s.workers.CaughtUp()
	}
	forget := time.NewTicker(time.Minute)
	defer forget.Stop()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachRecord(func(rec *kgo.Record) {
			if ev, err := schema.Decode(rec); err == nil {
				if ws, ok := ev.Data.(schema.WorkerStatus); ok {
					s.workers.Observe(ws)
				}
			}
			if end, ok := behind[rec.Partition]; ok && rec.Offset+1 >= end {
				delete(behind, rec.Partition)
				if len(behind) == 0 {
					s.workers.CaughtUp()
				}
			}
		})
		select {
		case <-forget.C:
			s.workers.Forget(s.cfg.Now())
		default:
		}
	}
}

// poolOf is the pool of a job: pool, or short for jobs from before pools
// were recorded.
func poolOf(pool string) string {
	if pool == "" {
		return schema.PoolShort
	}
	return pool
}

// newWorkersTable is the table of s, per its configuration.
func newWorkersTable(cfg Config) *workers.Table { return workers.New(workerTTL, cfg.KnownTypesWindow) }
