package scheduler

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// Per-queue controls. Queues are per tenant: a queue name is a label on a
// tenant's jobs, so GET /v1/queues lists the caller's queues, and pausing
// queue q pauses only the caller's jobs in q (other tenants' jobs in a queue
// of the same name keep running). The admin key acts for one tenant with
// the Ferry-Tenant header. A paused queue keeps accepting jobs; they wait,
// ready, until the queue is resumed. Pauses are stored in Postgres
// (scheduler_queue_pauses) and copied into Redis, where dispatch reads them.

// queueView is a queue on the wire.
type queueView struct {
	Name string `json:"name"`
	// Depth is the number of ready jobs (waiting for a worker slot).
	Depth   int64 `json:"depth"`
	Delayed int64 `json:"delayed"`
	// OldestReadyAge is how long the ready job waiting longest has waited
	// ("0s" when none is ready).
	OldestReadyAge string `json:"oldest_ready_age"`
	// Running counts jobs dispatched and not yet finished.
	Running int64 `json:"running"`
	Paused  bool  `json:"paused"`
	// Unroutable counts jobs that wait because no live worker handles
	// their type (not part of Depth).
	Unroutable int64 `json:"unroutable"`
}

func viewOf(q qstore.QueueState, now time.Time) queueView {
	age := time.Duration(0)
	if q.Ready > 0 && !q.OldestReady.IsZero() {
		age = max(now.Sub(q.OldestReady), 0).Round(time.Millisecond)
	}
	return queueView{Name: q.Name, Depth: q.Ready, Delayed: q.Delayed, OldestReadyAge: age.String(), Running: q.Running, Paused: q.Paused,
		Unroutable: q.Unroutable}
}

// Routes mounts the queue routes (the platform adds /healthz, /readyz and
// /metrics). They need API keys, so Postgres.
func (s *Service) Routes(r chi.Router) {
	if s.deps.Keys == nil {
		return
	}
	r.Group(func(r chi.Router) {
		r.Use(s.deps.Authenticate(), auth.RequireTenant)
		r.Get("/v1/queues", s.handleListQueues)
		r.Post("/v1/queues/{queue}/pause", s.handlePause)
		r.Post("/v1/queues/{queue}/resume", s.handleResume)
		s.flowRoutes(r) // breakers and concurrency keys (breakers.go)
	})
}

func tenantOf(r *http.Request) string {
	p, _ := auth.FromContext(r.Context())
	return p.TenantID
}

func (s *Service) handleListQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := s.store.Queues(r.Context(), tenantOf(r), s.cfg.Pools)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	now := s.cfg.Now()
	out := make([]queueView, 0, len(qs))
	for _, q := range qs {
		out = append(out, viewOf(q, now))
	}
	httpx.WriteList(w, "queues", out, "")
}

func (s *Service) queueParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	q := chi.URLParam(r, "queue")
	if !jobs.ValidQueue(q) {
		e := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "invalid queue name")
		e.Fields = map[string]string{"queue": "must hold 1 to 64 lower-case letters, digits, '_', '.' or '-', starting with a letter or digit"}
		httpx.WriteError(w, r, e)
		return "", false
	}
	return q, true
}

func (s *Service) handlePause(w http.ResponseWriter, r *http.Request) {
	q, ok := s.queueParam(w, r)
	if !ok {
		return
	}
	tenant := tenantOf(r)
	if pg := s.deps.Postgres; pg != nil {
		if _, err := pg.Exec(r.Context(), `INSERT INTO scheduler_queue_pauses (tenant_id, queue) VALUES ($1, $2)
			ON CONFLICT DO NOTHING`, tenant, q); err != nil {
			httpx.WriteError(w, r, err)
			return
		}
	}
	if err := s.store.Pause(r.Context(), tenant, q); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.Info("queue paused", "tenant", tenant, "queue", q)
	s.writeQueue(w, r, tenant, q)
}

func (s *Service) handleResume(w http.ResponseWriter, r *http.Request) {
	q, ok := s.queueParam(w, r)
	if !ok {
		return
	}
	tenant := tenantOf(r)
	if pg := s.deps.Postgres; pg != nil {
		if _, err := pg.Exec(r.Context(), `DELETE FROM scheduler_queue_pauses WHERE tenant_id = $1 AND queue = $2`, tenant, q); err != nil {
			httpx.WriteError(w, r, err)
			return
		}
	}
	if err := s.store.Resume(r.Context(), tenant, q, s.cfg.Pools); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.log.Info("queue resumed", "tenant", tenant, "queue", q)
	s.wakeAll()
	s.writeQueue(w, r, tenant, q)
}

// writeQueue answers 200 with the tenant's queue q.
func (s *Service) writeQueue(w http.ResponseWriter, r *http.Request, tenant, q string) {
	qs, err := s.store.Queues(r.Context(), tenant, s.cfg.Pools)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	v := queueView{Name: q, OldestReadyAge: "0s"}
	for _, x := range qs {
		if x.Name == q {
			v = viewOf(x, s.cfg.Now())
		}
	}
	httpx.WriteJSON(w, http.StatusOK, v)
}
