package worker

import (
	"sort"
	"sync"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/worker/workertype"
)

// HandlerFunc runs one attempt of a job; see [workertype.HandlerFunc].
type HandlerFunc = workertype.HandlerFunc

// Job is one attempt of a job as a handler sees it; see [workertype.Job].
type Job = workertype.Job

// Error is a handler error with an explicit failure class.
type Error = workertype.Error

// Detached is returned by a handler whose attempt another system took over
// and reports through the api's callback routes; see [workertype.Detached].
type Detached = workertype.Detached

// PanicError reports a handler that panicked (class app_error).
type PanicError = workertype.PanicError

// Permanent marks err as permanent: the job is dead-lettered at once.
func Permanent(err error) error { return workertype.Permanent(err) }

// Retryable marks err as transient: the job is retried no sooner than
// retryAfter (zero: the normal backoff).
func Retryable(err error, retryAfter time.Duration) error {
	return workertype.Retryable(err, retryAfter)
}

// ClassOf returns the failure class a handler error is reported with.
func ClassOf(err error) (schema.ErrorClass, time.Duration) { return workertype.ClassOf(err) }

// NewJob builds a Job whose Progress calls progress (nil: ignored). Use it
// to call a handler directly in a unit test.
func NewJob(j Job, progress func(percent float64, message string)) *Job {
	return workertype.NewJob(j, progress)
}

// Registry maps job types to handlers. It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]HandlerFunc
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{handlers: map[string]HandlerFunc{}} }

// Register makes h run jobs of type typ. A later registration of the same
// type replaces the earlier one, so an application may override a built-in
// handler. It panics on an empty type or a nil handler (programming errors).
func (r *Registry) Register(typ string, h HandlerFunc) {
	if typ == "" || h == nil {
		panic("worker: Register needs a type and a handler")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handlers == nil {
		r.handlers = map[string]HandlerFunc{}
	}
	r.handlers[typ] = h
}

// Lookup returns the handler of typ.
func (r *Registry) Lookup(typ string) (HandlerFunc, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[typ]
	return h, ok
}

// Types lists the registered types, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.handlers))
	for t := range r.handlers {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
