package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/services/worker/internal/recent"
)

const source = "ferry/worker"

// Causes of a handler context being cancelled by the runtime.
var (
	errJobCancelled = errors.New("worker: job cancelled")
	errJobTimeout   = errors.New("worker: job timed out")
	errShutdown     = errors.New("worker: worker stopping")
)

// terminalTimeout bounds the wait for a completed/failed acknowledgement.
const terminalTimeout = 30 * time.Second

// Bounds of the text a handler puts into events (schema.EventText: valid
// UTF-8, no NUL), shared with the api's callback routes.
const (
	maxErrorMessage    = schema.MaxErrorMessage
	maxProgressMessage = schema.MaxProgressMessage
)

// Service is a running worker; it implements service.Component.
type Service struct {
	deps   *service.Deps
	cfg    Config
	reg    *Registry
	log    *slog.Logger
	tracer *kotel.Tracer
	prod   *kgo.Client

	dispatchTopic string
	workersTopic  string

	ran atomic.Bool

	// consumer is the dispatch consumer while Run runs.
	consumer *kgo.Client
	queue    chan queued
	// hold keeps dispatches leased ahead until their due time (hold.go).
	hold     *hold
	room     chan struct{}
	stopping chan struct{}
	// reannounce (capacity 1) asks the status loop for an announcement now.
	reannounce chan struct{}

	mu         sync.Mutex
	running    map[string]*run // by job id
	seen       *recent.Map[string, seenJob]
	assigned   map[int32]uint64 // dispatch partition → assignment generation
	gen        uint64
	handedBack []schema.JobRef
	abandoned  bool // Run gave up waiting; late finishers report nothing
}

type queued struct {
	rec *kgo.Record
	gen uint64
}

// seenJob is what the worker remembers of a job it ran or saw cancelled.
type seenJob struct {
	attempt    int
	dispatchID string
	completed  bool // acknowledged by Kafka, or by the scheduler's superseded
	cancelled  bool
	// unreported is the outcome of attempt whose completed/failed record
	// was never acknowledged. The scheduler still has the job in flight and
	// re-dispatches it when the lease expires; that dispatch re-reports this
	// outcome instead of being dropped as a duplicate (which left the job
	// running forever) or running the handler again.
	unreported schema.Lifecycle
}

// run is one running attempt.
type run struct {
	ref        schema.JobRef
	dispatchID string
	cancel     context.CancelCauseFunc
	abandoned  bool
	// reported: its outcome is with the producer (finish); a stopping
	// worker does not hand it back, the final flush delivers it.
	reported bool
}

func newService(deps *service.Deps, cfg Config, reg *Registry, log *slog.Logger) *Service {
	return &Service{
		deps:          deps,
		cfg:           cfg,
		reg:           reg,
		log:           log,
		tracer:        kafkax.Tracer(kotel.ConsumerGroup("ferry-worker-" + cfg.Pool)),
		prod:          deps.Kafka,
		dispatchTopic: deps.Topics.Dispatch(cfg.Pool),
		workersTopic:  deps.Topics.Workers(),
		queue:         make(chan queued, cfg.QueueSize),
		hold:          newHold(cfg.Hold),
		room:          make(chan struct{}, 1),
		stopping:      make(chan struct{}),
		reannounce:    make(chan struct{}, 1),
		running:       map[string]*run{},
		seen:          recent.New[string, seenJob](cfg.RememberJobs),
		assigned:      map[int32]uint64{},
	}
}

// Run consumes dispatches and runs their handlers until ctx is done, then
// stops gracefully: it stops fetching, lets running handlers finish within
// Config.Grace, cancels and hands back the rest (and every dispatch not yet
// started) in a final WorkerStatus, flushes the producer, commits offsets
// and returns nil. Run may be called once.
func (s *Service) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	cancels, err := s.newCancelConsumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: nothing was taken, nothing to hand back
		}
		return err
	}
	defer cancels.Close()
	consumer, err := kafkax.NewClient(s.deps.KafkaConfig("worker-"+s.cfg.Pool),
		append(kafkax.MarkedGroup("ferry-worker-"+s.cfg.Pool, s.dispatchTopic),
			kgo.OnPartitionsAssigned(s.onAssigned),
			kgo.OnPartitionsRevoked(s.onRevoked),
			kgo.OnPartitionsLost(s.onLost),
		)...)
	if err != nil {
		return err
	}
	s.consumer = consumer
	defer consumer.Close()

	// Handlers run under hardCtx, not ctx: they may finish during the grace.
	hardCtx, hardCancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer hardCancel(nil)

	var runners sync.WaitGroup
	for range s.cfg.Concurrency {
		runners.Go(func() { s.runner(hardCtx) })
	}
	var holding sync.WaitGroup
	holding.Go(func() { s.hold.run(s.stopping) })
	defer s.registerGauges()() // observability: slots and hold (observe.go)
	bgCtx, bgStop := context.WithCancel(context.WithoutCancel(ctx))
	var bg sync.WaitGroup
	bg.Go(func() { s.cancelLoop(bgCtx, cancels) })
	bg.Go(func() {
		kafkax.WatchLag(bgCtx, consumer, "ferry-worker-"+s.cfg.Pool, []string{s.dispatchTopic}, nil)
	})
	statusCtx, statusStop := context.WithCancel(bgCtx)
	var status sync.WaitGroup
	status.Go(func() { s.statusLoop(statusCtx) })

	s.log.Info("worker started", "concurrency", s.cfg.Concurrency, "topic", s.dispatchTopic, "handlers", s.reg.Types())
	s.pollLoop(ctx)

	// Graceful stop.
	consumer.PauseFetchTopics(s.dispatchTopic)
	close(s.stopping)
	statusStop()
	status.Wait()
	s.announce(context.WithoutCancel(ctx), true, nil)
	s.awaitRunners(&runners, hardCancel)
	holding.Wait()
	s.handBackUnfinished()
	s.mu.Lock()
	handedBack := slices.Clone(s.handedBack)
	s.mu.Unlock()

	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	s.announce(stopCtx, true, handedBack)
	if err := s.prod.Flush(stopCtx); err != nil {
		s.log.Error("flushing producer", "err", err)
	}
	if err := consumer.CommitMarkedOffsets(stopCtx); err != nil {
		s.log.Error("committing offsets", "err", err)
	}
	bgStop()
	bg.Wait()
	s.log.Info("worker stopped", "handed_back", len(handedBack))
	return nil
}

// awaitRunners waits for the running handlers for the grace period, then
// cancels them (errShutdown) and waits 5 s more for them to return.
func (s *Service) awaitRunners(runners *sync.WaitGroup, hardCancel context.CancelCauseFunc) {
	done := make(chan struct{})
	go func() { runners.Wait(); close(done) }()
	grace := time.NewTimer(s.cfg.Grace)
	select {
	case <-done:
		grace.Stop()
	case <-grace.C:
		s.log.Warn("grace period over: cancelling running handlers", "running", s.runningCount())
		hardCancel(errShutdown)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.log.Error("handlers ignore cancellation; handing their jobs back anyway", "running", s.runningCount())
		}
	}
}

// handBackUnfinished adds to the handed-back jobs those still running and
// the dispatches never started (queued or held); it commits past the
// latter so no other worker re-reads them: the scheduler re-dispatches them
// (one leased ahead with its not-before again, so never early).
func (s *Service) handBackUnfinished() {
	held := s.hold.drain()
	s.mu.Lock()
	s.abandoned = true
	for _, r := range s.running {
		if !r.abandoned && !r.reported {
			r.abandoned = true
			s.handedBack = append(s.handedBack, r.ref)
		}
	}
	for _, h := range held {
		s.handedBack = append(s.handedBack, h.d.JobRef)
	}
	s.mu.Unlock()
	for _, h := range held {
		s.consumer.MarkCommitRecords(h.q.rec)
	}
	for {
		select {
		case q := <-s.queue:
			if d, ok := s.decode(q.rec); ok {
				s.mu.Lock()
				s.handedBack = append(s.handedBack, d.JobRef)
				s.mu.Unlock()
			}
			s.consumer.MarkCommitRecords(q.rec)
		default:
			return
		}
	}
}

// newCancelConsumer reads the cancelled topic from its current end, with no
// group: every worker sees every cancellation. The end offsets are listed
// before Run starts work so no cancellation after that point is missed.
func (s *Service) newCancelConsumer(ctx context.Context) (*kgo.Client, error) {
	topic := s.deps.Topics.Lifecycle(schema.EventCancelled)
	ends, err := kadm.NewClient(s.prod).ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("worker: list end offsets of %s: %w", topic, err)
	}
	return kafkax.NewClient(s.deps.KafkaConfig("worker-cancel-"+s.cfg.Pool),
		kgo.ConsumePartitions(ends.KOffsets()),
		kgo.FetchMaxWait(250*time.Millisecond),
	)
}

func (s *Service) cancelLoop(ctx context.Context, cl *kgo.Client) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			s.log.Warn("fetching cancellations", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(func(rec *kgo.Record) {
			ev, err := schema.Decode(rec)
			if err != nil {
				s.log.Warn("skipping undecodable cancellation", "offset", rec.Offset, "err", err)
				return
			}
			if c, ok := ev.Data.(schema.Cancelled); ok {
				s.cancelJob(c)
			}
		})
	}
}

func (s *Service) cancelJob(c schema.Cancelled) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sj, _ := s.seen.Get(c.JobID)
	superseded := c.Reason == schema.ReasonSuperseded
	if superseded {
		// The job completed by another dispatch: stop this copy and report
		// nothing (the scheduler already freed its slot); never run it again.
		sj.completed = true
	} else {
		sj.cancelled = true
	}
	sj.attempt = max(sj.attempt, c.Attempt)
	s.seen.Put(c.JobID, sj)
	if r, ok := s.running[c.JobID]; ok {
		s.log.Info("cancelling running job", append(telemetry.JobAttrs(r.ref, nil), "reason", c.Reason)...)
		if superseded {
			r.abandoned = true
		}
		if r.cancel != nil {
			r.cancel(errJobCancelled)
		}
	}
}

// pollLoop fetches dispatches into the bounded queue until ctx is done. It
// never fetches more than the queue has room for; while the queue is full it
// pauses fetching the dispatch topic (group heartbeats go on in the
// background) and resumes once runners have emptied half of it: resuming
// for every freed slot would drop the client's buffered fetch and start a
// new one per job.
func (s *Service) pollLoop(ctx context.Context) {
	paused := false
	low := cap(s.queue) / 2
	for ctx.Err() == nil {
		free := cap(s.queue) - len(s.queue)
		if free <= 0 || (paused && len(s.queue) > low) {
			if !paused {
				s.consumer.PauseFetchTopics(s.dispatchTopic)
				paused = true
			}
			select {
			case <-ctx.Done():
				return
			case <-s.room:
			}
			continue
		}
		if paused {
			s.consumer.ResumeFetchTopics(s.dispatchTopic)
			paused = false
		}
		fs := s.consumer.PollRecords(ctx, free)
		if ctx.Err() != nil || fs.IsClientClosed() {
			// Records of this last poll are not queued nor marked: the
			// next owner of their partitions reads them again.
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			s.log.Warn("fetching dispatches", "topic", t, "partition", p, "err", err)
		})
		s.mu.Lock()
		var qs []queued
		fs.EachRecord(func(rec *kgo.Record) {
			qs = append(qs, queued{rec: rec, gen: s.assigned[rec.Partition]})
		})
		s.mu.Unlock()
		for _, q := range qs {
			s.queue <- q // never blocks: only the poll loop sends, within free
		}
	}
}

func (s *Service) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range m[s.dispatchTopic] {
		s.gen++
		s.assigned[p] = s.gen
	}
	s.announceSoon()
}

func (s *Service) onLost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range m[s.dispatchTopic] {
		delete(s.assigned, p)
	}
	s.announceSoon()
}

// onRevoked forgets the revoked partitions (queued dispatches of theirs are
// dropped unstarted: the next owner reads them from the committed offset)
// and commits what was marked.
func (s *Service) onRevoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	s.onLost(ctx, cl, m)
	if err := cl.CommitMarkedOffsets(ctx); err != nil {
		s.log.Warn("committing offsets on revoke", "err", err)
	}
}

func (s *Service) runner(hardCtx context.Context) {
	for {
		select {
		case <-s.stopping:
			return
		case h := <-s.hold.due:
			s.start(hardCtx, h.q, h.d)
		case q := <-s.queue:
			select {
			case s.room <- struct{}{}:
			default:
			}
			select {
			case <-s.stopping:
				// Stop began while this one was taken: hand it back.
				s.queue <- q
				return
			default:
			}
			s.process(hardCtx, q)
		}
	}
}

func (s *Service) decode(rec *kgo.Record) (schema.Dispatch, bool) {
	ev, err := schema.Decode(rec)
	if err != nil {
		s.log.Warn("skipping undecodable dispatch", "partition", rec.Partition, "offset", rec.Offset, "err", err)
		return schema.Dispatch{}, false
	}
	d, ok := ev.Data.(schema.Dispatch)
	if !ok {
		s.log.Warn("skipping unexpected record on dispatch topic", "type", ev.Type, "offset", rec.Offset)
	}
	return d, ok
}

// isV7 reports whether id looks like a canonical UUIDv7, whose string order
// is its creation order.
func isV7(id string) bool { return len(id) == 36 && id[14] == '7' }

// dropReasonLocked says why d must not run, or "".
func (s *Service) dropReasonLocked(d schema.Dispatch) string {
	if r, ok := s.running[d.JobID]; ok {
		if d.Attempt < r.ref.Attempt || (d.Attempt == r.ref.Attempt && isV7(d.DispatchID) && isV7(r.dispatchID) && d.DispatchID < r.dispatchID) {
			return "older than the running dispatch"
		}
		return "job already running"
	}
	sj, ok := s.seen.Get(d.JobID)
	switch {
	case !ok:
		return ""
	case sj.completed:
		return "job already completed"
	case sj.cancelled && d.Attempt <= sj.attempt:
		return "job cancelled"
	case d.DispatchID == sj.dispatchID:
		return "dispatch already run"
	case d.Attempt < sj.attempt, d.Attempt == sj.attempt && isV7(d.DispatchID) && isV7(sj.dispatchID) && d.DispatchID < sj.dispatchID:
		return "older than a dispatch already run"
	}
	return ""
}

// unreportedLocked returns the known but unacknowledged outcome d should
// report instead of running, or nil. Only a dispatch of the same attempt
// qualifies: a later attempt (a re-drive) runs afresh.
func (s *Service) unreportedLocked(d schema.Dispatch) schema.Lifecycle {
	if _, ok := s.running[d.JobID]; ok {
		return nil
	}
	sj, ok := s.seen.Get(d.JobID)
	if !ok || sj.completed || sj.unreported == nil || d.Attempt != sj.attempt {
		return nil
	}
	return sj.unreported
}

// reReport produces an outcome again for the dispatch r, stamped with r's
// dispatch id: the scheduler applies a completion or failure only for the
// dispatch it has in flight.
func (s *Service) reReport(rec *kgo.Record, r *run, out schema.Lifecycle, log *slog.Logger) {
	traceCtx, span := kafkax.ProcessSpan(s.tracer, rec)
	defer span.End()
	log.Info("re-reporting an outcome whose record was never acknowledged", "event", out.EventType())
	switch o := out.(type) {
	case *schema.Completed:
		c := *o
		c.DispatchID, c.WorkerID = r.dispatchID, s.cfg.WorkerID
		s.finish(context.WithoutCancel(traceCtx), r, &c, true, log)
	case *schema.Failed:
		f := *o
		f.DispatchID, f.WorkerID = r.dispatchID, s.cfg.WorkerID
		s.finish(context.WithoutCancel(traceCtx), r, &f, false, log)
	}
}

// process runs one dispatch, from dedup to its terminal event (finish);
// one leased ahead of its due time goes to the hold, or, when the hold is
// full, waits here.
func (s *Service) process(hardCtx context.Context, q queued) {
	d, ok := s.decode(q.rec)
	if !ok {
		s.consumer.MarkCommitRecords(q.rec)
		return
	}
	if d.NotBefore != nil && time.Until(*d.NotBefore) > 0 && s.hold.add(q, d) {
		return // the hold hands it to a runner when due
	}
	if !s.awaitNotBefore(d) {
		s.queue <- q // stopping: handed back with the dispatches never started
		return
	}
	s.start(hardCtx, q, d)
}

// start runs dispatch d (of record q) that is due: admission, then the
// handler and its outcome.
func (s *Service) start(hardCtx context.Context, q queued, d schema.Dispatch) {
	log := s.jobLogger(d.JobRef, kafkax.RecordContext(q.rec), d.DispatchID)
	r, h := s.admit(hardCtx, q, d, log)
	if r == nil {
		return
	}
	traceCtx, span := kafkax.ProcessSpan(s.tracer, q.rec)
	defer span.End()
	traceCtx = context.WithoutCancel(traceCtx)

	startedAt := time.Now().UTC()
	if d.Job.NotAfter != nil && startedAt.After(*d.Job.NotAfter) {
		s.finish(traceCtx, r, &schema.Failed{
			JobRef: d.JobRef, WorkerID: s.cfg.WorkerID, DispatchID: d.DispatchID,
			Error:     schema.ErrorInfo{Class: schema.ClassExpired, Message: "not_after passed before the job started"},
			StartedAt: startedAt, FinishedAt: startedAt,
		}, false, log)
		return
	}
	s.execute(hardCtx, traceCtx, r, h, d, startedAt, log)
}

// admit decides, under the lock, whether this worker runs dispatch d: not
// for a revoked partition, a type it lacks (rejected, never failed), a job
// whose outcome it still has to report (re-reported) or a duplicate. It
// returns the run and its handler, or nil when the dispatch was dealt with.
func (s *Service) admit(hardCtx context.Context, q queued, d schema.Dispatch, log *slog.Logger) (*run, HandlerFunc) {
	s.mu.Lock()
	if g, ok := s.assigned[q.rec.Partition]; !ok || g != q.gen {
		s.mu.Unlock()
		log.Debug("dropping dispatch of a revoked partition")
		return nil, nil
	}
	h, found := s.reg.Lookup(d.Job.Type)
	if !found {
		s.mu.Unlock()
		s.reject(hardCtx, q.rec, d, log)
		return nil, nil
	}
	if out := s.unreportedLocked(d); out != nil {
		r := &run{ref: d.JobRef, dispatchID: d.DispatchID}
		s.running[d.JobID] = r
		s.mu.Unlock()
		s.consumer.MarkCommitRecords(q.rec)
		s.reReport(q.rec, r, out, log)
		return nil, nil
	}
	if reason := s.dropReasonLocked(d); reason != "" {
		s.mu.Unlock()
		log.Info("dropping dispatch", "reason", reason)
		s.consumer.MarkCommitRecords(q.rec)
		return nil, nil
	}
	r := &run{ref: d.JobRef, dispatchID: d.DispatchID}
	s.running[d.JobID] = r
	s.seen.Put(d.JobID, seenJob{attempt: d.Attempt, dispatchID: d.DispatchID})
	s.mu.Unlock()
	s.consumer.MarkCommitRecords(q.rec)
	return r, h
}

// execute runs the handler of an admitted dispatch inside the handler span
// (started, progress and the terminal event continue the job's trace),
// bounded by the job's timeout, its cancellation and shutdown, and settles
// the attempt.
func (s *Service) execute(hardCtx, traceCtx context.Context, r *run, h HandlerFunc, d schema.Dispatch, startedAt time.Time, log *slog.Logger) {
	traceCtx, hspan := s.startHandlerSpan(traceCtx, d, startedAt)
	jobCtx, cancel := context.WithCancelCause(traceCtx)
	defer cancel(nil)
	stopHard := context.AfterFunc(hardCtx, func() { cancel(context.Cause(hardCtx)) })
	defer stopHard()
	if t := d.Job.Timeout.D(); t > 0 {
		var cancelT context.CancelFunc
		jobCtx, cancelT = context.WithTimeoutCause(jobCtx, t, errJobTimeout)
		defer cancelT()
	}
	s.mu.Lock()
	r.cancel = cancel
	sj, _ := s.seen.Get(d.JobID)
	s.mu.Unlock()
	if sj.cancelled || sj.completed {
		cancel(errJobCancelled)
	}

	started := &schema.Started{JobRef: d.JobRef, WorkerID: s.cfg.WorkerID, DispatchID: d.DispatchID, StartedAt: startedAt}
	rep := s.startReporter(traceCtx, d, func() { s.produceAsync(traceCtx, started) })
	job := NewJob(Job{
		ID: d.JobID, TenantID: d.TenantID, Attempt: d.Attempt, Type: d.Job.Type, Queue: d.Job.Queue,
		Payload: d.Job.Payload, Tags: d.Job.Tags, DispatchID: d.DispatchID,
	}, rep.report)

	result, herr := call(jobCtx, h, job)
	end := attemptEnd{startedAt: startedAt, finishedAt: time.Now().UTC(), result: result, err: herr, cause: context.Cause(jobCtx)}
	rep.stop()
	defer s.endHandler(hspan, d, startedAt, end.finishedAt, herr, end.cause)
	s.settle(traceCtx, r, d, rep, end, log)
}

// attemptEnd is how a handler call ended: its result or error, and why its
// context ended (nil: it did not).
type attemptEnd struct {
	startedAt, finishedAt time.Time
	result                any
	err, cause            error
}

// settle reports the attempt's outcome: completed, detached to another
// system, handed back on shutdown, or failed with the class its end says.
func (s *Service) settle(traceCtx context.Context, r *run, d schema.Dispatch, rep *reporter, end attemptEnd, log *slog.Logger) {
	base := schema.Failed{JobRef: d.JobRef, WorkerID: s.cfg.WorkerID, DispatchID: d.DispatchID, StartedAt: end.startedAt, FinishedAt: end.finishedAt}
	var detached *Detached
	switch herr, cause := end.err, end.cause; {
	case herr == nil:
		s.finish(traceCtx, r, &schema.Completed{
			JobRef: d.JobRef, WorkerID: s.cfg.WorkerID, DispatchID: d.DispatchID,
			Result: s.encodeResult(end.result, log), StartedAt: end.startedAt, FinishedAt: end.finishedAt,
		}, true, log)
	case errors.As(herr, &detached) && cause == nil:
		s.detach(traceCtx, r, rep.last(), detached, log)
	case errors.Is(cause, errShutdown):
		s.handBack(r, d, log)
	case errors.Is(cause, errJobCancelled):
		base.Error = schema.ErrorInfo{Class: schema.ClassCancelled, Message: "job cancelled while running"}
		s.finish(traceCtx, r, &base, false, log)
	case errors.Is(cause, errJobTimeout):
		base.Error = schema.ErrorInfo{Class: schema.ClassTimeout, Message: fmt.Sprintf("job exceeded its timeout of %s: %v", d.Job.Timeout.D(), herr)}
		s.finish(traceCtx, r, &base, false, log)
	default:
		class, retryAfter := ClassOf(herr)
		base.Error = schema.ErrorInfo{Class: class, Message: herr.Error()}
		base.RetryAfter = schema.Duration(retryAfter)
		s.finish(traceCtx, r, &base, false, log)
	}
}

// handBack records a job stopped by shutdown as handed back (the stop
// announcement returns it to the scheduler at the same attempt).
func (s *Service) handBack(r *run, d schema.Dispatch, log *slog.Logger) {
	s.mu.Lock()
	if !r.abandoned {
		r.abandoned = true
		s.handedBack = append(s.handedBack, d.JobRef)
	}
	delete(s.running, d.JobID)
	s.mu.Unlock()
	log.Info("handing back job stopped by shutdown")
}

// detach hands r's attempt to the system that took it over (see Detached):
// a progress event with the lease tells the scheduler the attempt is held
// elsewhere, and the slot is free at once. The job is remembered as run by
// this dispatch, not completed: a re-dispatch after a missed lease runs it
// again. If the event is lost, the scheduler's own lease expires first and
// the job is dispatched again (worker_lost), as for a worker that died.
func (s *Service) detach(ctx context.Context, r *run, percent float64, d *Detached, log *slog.Logger) {
	p := &schema.Progress{JobRef: r.ref, WorkerID: s.cfg.WorkerID, DispatchID: r.dispatchID, Percent: percent,
		Message: schema.EventText(d.Message, maxProgressMessage), At: time.Now().UTC(), Lease: schema.Duration(d.Lease)}
	rec, err := schema.NewRecord(s.deps.Topics.Lifecycle(schema.EventProgress), source, p)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, terminalTimeout)
		err = s.prod.ProduceSync(pctx, rec).FirstErr()
		cancel()
	}
	if err != nil {
		log.Error("producing the hand-over to the receiver; the job is dispatched again once its lease expires", "err", err)
	} else {
		log.Info("attempt held by its receiver", "lease", d.Lease)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[r.ref.JobID] == r {
		delete(s.running, r.ref.JobID)
	}
}

// call runs h, turning a panic into an app_error.
func call(ctx context.Context, h HandlerFunc, job *Job) (result any, err error) {
	defer func() {
		if v := recover(); v != nil {
			result, err = nil, &PanicError{Value: v}
		}
	}()
	return h(ctx, job)
}

func (s *Service) encodeResult(result any, log *slog.Logger) json.RawMessage {
	if result == nil {
		return nil
	}
	var b []byte
	var err error
	switch v := result.(type) {
	case json.RawMessage:
		if json.Valid(v) {
			b = v
		} else {
			b, err = json.Marshal(string(v))
		}
	default:
		b, err = json.Marshal(v)
	}
	if err != nil {
		log.Warn("result is not JSON-encodable", "err", err)
		b, _ = json.Marshal(map[string]any{"error": "result is not JSON-encodable: " + schema.SanitizeText(err.Error(), maxErrorMessage)})
	}
	b = storableResult(b, log)
	if len(b) > s.cfg.MaxResultBytes {
		log.Warn("result too large; replaced", "bytes", len(b), "limit", s.cfg.MaxResultBytes)
		b, _ = json.Marshal(map[string]any{"truncated": true, "bytes": len(b), "limit": s.cfg.MaxResultBytes})
	}
	return b
}

// storableResult makes b, a handler's JSON result, storable by every
// projection (schema.SanitizeJSON: NUL and out-of-range numbers replaced,
// as encoding/json already replaces invalid UTF-8). The job is completed,
// not failed: its handler succeeded and its side effects happened, so
// failing it would retry or dead-letter work that is done, for a value
// that only informs.
func storableResult(b []byte, log *slog.Logger) []byte {
	clean, changed, err := schema.SanitizeJSON(b)
	switch {
	case err != nil:
		log.Warn("result cannot be stored; replaced", "err", err)
		b, _ = json.Marshal(map[string]any{"error": "result cannot be stored: " + schema.SanitizeText(err.Error(), maxErrorMessage)})
		return b
	case changed:
		log.Warn("result held values Postgres cannot store (NUL, numbers out of range); replaced them")
	}
	return clean
}

// finish produces the terminal event. The runner goes on at once; the
// job stays running (duplicates of it are dropped) until the record is
// acknowledged, and counts as completed only then (rememberLocked). A
// failure's message is made storable text here, whatever built it.
func (s *Service) finish(ctx context.Context, r *run, data schema.Lifecycle, completed bool, log *slog.Logger) {
	if f, ok := data.(*schema.Failed); ok {
		f.Error.Message = schema.EventText(f.Error.Message, maxErrorMessage)
	}
	s.mu.Lock()
	skip := r.abandoned
	r.reported = !skip
	s.mu.Unlock()
	if skip { // an abandoned (superseded) copy has nothing to report
		s.ended(r, data, completed, true)
		return
	}
	rec, err := schema.NewRecord(s.deps.Topics.Lifecycle(data.EventType()), source, data)
	if err != nil {
		s.afterReport(r, data, completed, err, log)
		return
	}
	// The producer retries within its own limits until the deadline: that
	// is the bounded retry of this report.
	pctx, cancel := context.WithTimeout(ctx, terminalTimeout)
	s.prod.Produce(pctx, rec, func(_ *kgo.Record, err error) {
		cancel()
		s.afterReport(r, data, completed, err, log)
	})
}

// afterReport logs how the terminal report of r went and ends r.
func (s *Service) afterReport(r *run, data schema.Lifecycle, completed bool, err error, log *slog.Logger) {
	if err != nil {
		log.Error("producing terminal event; the job's next dispatch re-reports it", "event", data.EventType(), "err", err)
	} else if f, ok := data.(*schema.Failed); ok {
		log.Info("job failed", "class", f.Error.Class, "err", f.Error.Message)
	} else {
		log.Debug("job completed")
	}
	s.ended(r, data, completed, err == nil)
}

// ended forgets r as running and remembers its outcome.
func (s *Service) ended(r *run, data schema.Lifecycle, completed, acked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[r.ref.JobID] == r {
		delete(s.running, r.ref.JobID)
	}
	s.rememberLocked(r, data, completed, acked)
}

// rememberLocked records how r ended. A job counts as completed only once
// its completed record is acknowledged; an outcome that was not is kept as
// unreported for the re-dispatch that follows the lease's expiry.
//
// A newer attempt seen meanwhile (cancelled, or dispatched) outranks r:
// lowering the remembered attempt to r's would let that attempt's cancel
// be forgotten and a later dispatch of it run.
func (s *Service) rememberLocked(r *run, data schema.Lifecycle, completed, acked bool) {
	sj, _ := s.seen.Get(r.ref.JobID)
	if sj.completed || sj.attempt > r.ref.Attempt {
		return // superseded meanwhile: completed by another dispatch, or a newer attempt is known
	}
	sj.attempt, sj.dispatchID, sj.unreported = r.ref.Attempt, r.dispatchID, nil
	switch {
	case !acked:
		sj.unreported = data
	case completed:
		sj.completed = true
	}
	s.seen.Put(r.ref.JobID, sj)
}

func (s *Service) produceAsync(ctx context.Context, data schema.Data) {
	var topic string
	if l, ok := data.(schema.Lifecycle); ok {
		topic = s.deps.Topics.Lifecycle(l.EventType())
	} else {
		topic = s.workersTopic
	}
	rec, err := schema.NewRecord(topic, source, data)
	if err != nil {
		s.log.Error("encoding event", "type", data.CEType(), "err", err)
		return
	}
	s.prod.Produce(ctx, rec, func(r *kgo.Record, err error) {
		if err != nil {
			s.log.Warn("producing event", "topic", r.Topic, "subject", string(r.Key), "err", err)
		}
	})
}

func (s *Service) runningCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

func (s *Service) statusLoop(ctx context.Context) {
	s.announce(ctx, false, nil)
	t := time.NewTicker(s.cfg.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.announce(ctx, false, nil)
		case <-s.reannounce:
			s.announce(ctx, false, nil)
		}
	}
}

// status is the worker's announcement now: its slots and what it routes.
// A stopping worker owns no partition any more.
func (s *Service) status(stopping bool) *schema.WorkerStatus {
	st := &schema.WorkerStatus{
		WorkerID: s.cfg.WorkerID, Pool: s.cfg.Pool, Slots: s.cfg.Concurrency, Running: s.runningCount(),
		At: time.Now().UTC(), Stopping: stopping, Routing: s.routing(), Hold: max(s.cfg.Hold, 0),
	}
	if stopping {
		st.Routing.Partitions = []int32{}
		st.Hold = 0
	}
	return st
}

// announce publishes the worker's slots. A stopping announcement has no
// slots and is waited for.
func (s *Service) announce(ctx context.Context, stopping bool, handedBack []schema.JobRef) {
	st := s.status(stopping)
	st.HandedBack = handedBack
	if !stopping {
		s.produceAsync(ctx, st)
		return
	}
	st.Slots = 0
	rec, err := schema.NewRecord(s.workersTopic, source, st)
	if err == nil {
		err = s.prod.ProduceSync(ctx, rec).FirstErr()
	}
	if err != nil {
		s.log.Error("announcing stop", "err", err)
	}
}
