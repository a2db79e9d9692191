package worker

import (
	"context"
	"log/slog"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/telemetry"
)

// jobLogger is s.log with a dispatch's attributes (job, tenant, attempt,
// trace, dispatch id), added only when a line is actually logged: most
// jobs log nothing at the usual levels, and slog's With formats its
// attributes up front, which cost every job an allocation-heavy step.
func (s *Service) jobLogger(ref schema.JobRef, traceCtx context.Context, dispatchID string) *slog.Logger {
	return slog.New(&jobAttrs{next: s.log.Handler(), ref: ref, traceCtx: traceCtx, dispatchID: dispatchID})
}

// jobAttrs is the slog.Handler of jobLogger: next with the job's
// attributes, built per logged line (or once, by WithAttrs/WithGroup).
type jobAttrs struct {
	next       slog.Handler
	ref        schema.JobRef
	traceCtx   context.Context
	dispatchID string
}

// handler is next with the job's attributes, as slog's With builds it.
func (h *jobAttrs) handler() slog.Handler {
	return slog.New(h.next).With(append(telemetry.JobAttrs(h.ref, h.traceCtx), "dispatch_id", h.dispatchID)...).Handler()
}

func (h *jobAttrs) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *jobAttrs) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

func (h *jobAttrs) WithAttrs(as []slog.Attr) slog.Handler { return h.handler().WithAttrs(as) }

func (h *jobAttrs) WithGroup(name string) slog.Handler { return h.handler().WithGroup(name) }
