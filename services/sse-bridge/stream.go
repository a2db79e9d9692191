package ssebridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/eventlog"
	"github.com/ferryhq/ferry/services/sse-bridge/internal/hub"
)

// replayPage is the number of events read from the log per replay step.
const replayPage = 500

// stream is one SSE request, parsed.
type stream struct {
	tenant string
	filter hub.Filter
	// job is set for a job stream: it ends after the job's terminal event.
	job bool
	// finished says the job had ended when the stream opened.
	finished bool
	// lastID is the client's Last-Event-ID; hasLast says it sent one.
	lastID  int64
	hasLast bool
}

func (s *Service) handleJobEvents(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	st := stream{tenant: p.TenantID, filter: hub.Filter{JobID: chi.URLParam(r, "id")}, job: true}
	release, err := s.slots.acquire(st.tenant)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	defer release()
	if err := st.parseLastID(r); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	job, err := s.findJob(r.Context(), st.tenant, st.filter.JobID)
	if errors.Is(err, eventlog.ErrJobNotFound) {
		httpx.WriteError(w, r, httpx.Errorf(http.StatusNotFound, "job_not_found", "job %q not found", st.filter.JobID))
		return
	}
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	// A client that already saw the final event (an EventSource
	// reconnecting after the stream ended) is told there is nothing more:
	// 204 stops EventSource from reconnecting.
	if st.hasLast && job.TerminalSeq > 0 && st.lastID >= job.TerminalSeq {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	st.finished = job.TerminalSeq > 0
	s.serve(w, r, st)
}

// findJob looks the job up, waiting up to JobGrace for one the log has not
// seen yet (a client may connect right after submitting).
func (s *Service) findJob(ctx context.Context, tenant, id string) (eventlog.Job, error) {
	deadline := time.Now().Add(s.cfg.JobGrace)
	for {
		j, err := s.events.Job(tenant, id)
		if !errors.Is(err, eventlog.ErrJobNotFound) || !time.Now().Before(deadline) {
			return j, err
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *Service) handleTenantEvents(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	st := stream{tenant: p.TenantID}
	release, err := s.slots.acquire(st.tenant)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	defer release()
	q := r.URL.Query()
	st.filter.JobTypes = listParam(q["type"])
	st.filter.Queues = listParam(q["queue"])
	st.filter.Tags = listParam(q["tag"])
	for _, name := range listParam(q["event"]) {
		et := schema.EventType(name)
		if !et.Valid() {
			e := httpx.Errorf(http.StatusBadRequest, "invalid_filter", "unknown event %q: use enqueued, started, progress, completed, failed, dlq or cancelled", name)
			e.Fields = map[string]string{"event": "unknown event " + name}
			httpx.WriteError(w, r, e)
			return
		}
		st.filter.Events = append(st.filter.Events, et)
	}
	if err := st.parseLastID(r); err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	s.serve(w, r, st)
}

// listParam splits repeated and comma-separated query values.
func listParam(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// parseLastID reads the Last-Event-ID header, or the last_event_id query
// parameter for clients that cannot set headers on their first request.
func (st *stream) parseLastID(r *http.Request) error {
	v := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if v == "" {
		v = strings.TrimSpace(r.URL.Query().Get("last_event_id"))
	}
	if v == "" {
		return nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		e := httpx.Errorf(http.StatusBadRequest, "invalid_last_event_id", "Last-Event-ID %q is not an id this service sent", v)
		e.Fields = map[string]string{"Last-Event-ID": "must be an id from a previous event"}
		return e
	}
	st.lastID, st.hasLast = n, true
	return nil
}

// sseWriter writes to one client, each write bounded by a deadline so a
// client that stops reading is cut off instead of holding the handler.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	dirty   bool
}

func (sw *sseWriter) write(b []byte) error {
	if !sw.dirty {
		_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
		sw.dirty = true
	}
	_, err := sw.w.Write(b)
	return err
}

func (sw *sseWriter) flush() error {
	if !sw.dirty {
		_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout))
	}
	err := sw.rc.Flush()
	sw.dirty = false
	return err
}

func (sw *sseWriter) control(event string, id int64, data string) error {
	return sw.write(fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", id, event, data))
}

var (
	errDone   = errors.New("stream done")
	errTooFar = errors.New("client too far behind")
)

// serve streams st: subscribe, replay from the log, then live events. The
// stream ends when its API key is revoked (keyWatch).
func (s *Service) serve(w http.ResponseWriter, r *http.Request, st stream) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	if p, _ := auth.FromContext(ctx); !p.Admin {
		defer s.keys.watch(p.KeyID, cancel)()
	}
	sub := s.hub.Subscribe(st.tenant, st.filter)
	defer s.hub.Unsubscribe(sub)
	s.conns.Add(context.WithoutCancel(ctx), 1)
	defer s.conns.Add(context.WithoutCancel(ctx), -1)

	sw, err := s.open(w)
	if err != nil {
		return
	}
	last, err := s.replay(ctx, sw, st)
	switch {
	case errors.Is(err, errTooFar):
		s.sendOverflow(ctx, sw, last)
		return
	case err != nil:
		if !errors.Is(err, errDone) && ctx.Err() == nil {
			s.log.Warn("sse-bridge: replay failed", "err", err)
		}
		return
	}
	if err := sw.flush(); err != nil || (st.job && st.finished) {
		return
	}
	s.live(ctx, sw, sub, st, last)
}

// open answers 200 with the event-stream headers and the stream's preamble.
func (s *Service) open(w http.ResponseWriter) (*sseWriter, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout}
	if err := sw.write([]byte(": ferry sse-bridge\nretry: 2000\n\n")); err != nil {
		return nil, err
	}
	return sw, sw.flush()
}

// live sends the hub's events after last until the client leaves, the
// job's stream ends, the key is revoked or the client falls too far behind.
func (s *Service) live(ctx context.Context, sw *sseWriter, sub *hub.Sub, st stream, last int64) {
	ka := time.NewTicker(s.cfg.KeepAlive)
	defer ka.Stop()
	var spare []*hub.Event
	for {
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), errKeyRevoked) {
				_ = sw.write([]byte(": api key revoked; stream closed\n\n"))
				_ = sw.flush()
			}
			return
		case <-ka.C:
			if sw.write([]byte(": keep-alive\n\n")) != nil || sw.flush() != nil {
				return
			}
		case <-sub.Ready():
			evs, overflowed := sub.Take(spare)
			var more bool
			if last, more = s.send(sw, st, evs, last); !more {
				return
			}
			if overflowed {
				if last, more = s.afterOverflow(ctx, sw, sub, st, last); !more {
					return
				}
			}
			if sw.flush() != nil {
				return
			}
			spare = evs
		}
	}
}

// send writes evs the replay has not sent; false when the stream is over
// (write failed, or a job stream's final event was sent).
func (s *Service) send(sw *sseWriter, st stream, evs []*hub.Event, last int64) (int64, bool) {
	for _, e := range evs {
		if e.Seq <= last {
			continue // already sent by the replay
		}
		if sw.write(e.Frame()) != nil {
			return last, false
		}
		last = e.Seq
		if st.job && e.Terminal() {
			_ = sw.flush()
			return last, false
		}
	}
	return last, true
}

// afterOverflow handles a burst that outran the subscription's buffer: catch up
// from the log, which holds everything the hub published, then go on live;
// a client too far behind gets an overflow message and is closed.
func (s *Service) afterOverflow(ctx context.Context, sw *sseWriter, sub *hub.Sub, st stream, last int64) (int64, bool) {
	sub.Reset()
	last, err := s.catchUp(ctx, sw, st, last)
	switch {
	case errors.Is(err, errTooFar):
		s.sendOverflow(ctx, sw, last)
		return last, false
	case err != nil: // errDone included
		return last, false
	}
	return last, true
}

// sendOverflow tells a client that fell too far behind where it is, before
// the stream closes: it resumes from there with Last-Event-ID.
func (s *Service) sendOverflow(ctx context.Context, sw *sseWriter, last int64) {
	s.overflows.Add(context.WithoutCancel(ctx), 1)
	_ = sw.control("overflow", last, fmt.Sprintf(`{"last_event_id":"%d","reason":"client too slow; reconnect with Last-Event-ID to resume"}`, last))
	_ = sw.flush()
}

// replay writes what the client missed from the log and returns the id of
// the last event sent (or the position the client is now at). It returns
// errDone when the stream is complete (the job's final event was sent).
func (s *Service) replay(ctx context.Context, sw *sseWriter, st stream) (int64, error) {
	after := st.lastID
	if st.hasLast && after != 0 { // 0 asks for everything the log holds
		evicted, head := s.events.Bounds()
		if after < evicted || after > head {
			// Events after the client's position are gone (or the
			// position is not from this process's log): it must re-sync.
			data := fmt.Sprintf(`{"last_event_id":"%d","reason":"position is outside the retention window; re-sync and continue from this event"}`, head)
			if err := sw.control("reset", head, data); err != nil {
				return 0, err
			}
			if !st.job {
				return head, nil
			}
			after = head
		}
	} else if !st.hasLast && !st.job {
		// A new tenant stream starts live.
		return 0, nil
	}
	return s.copyLog(ctx, sw, st, after, 0)
}

// catchUp sends what a client whose buffer overflowed missed after last,
// from the log, up to MaxLag events; errTooFar when there is more.
func (s *Service) catchUp(ctx context.Context, sw *sseWriter, st stream, last int64) (int64, error) {
	return s.copyLog(ctx, sw, st, last, s.cfg.MaxLag)
}

// copyLog writes the stream's events after id after from the log and
// returns the last id read. limit > 0 bounds the events read: errTooFar
// when there are more.
func (s *Service) copyLog(ctx context.Context, sw *sseWriter, st stream, after int64, limit int) (int64, error) {
	read := 0
	for {
		page := replayPage
		if limit > 0 {
			if read >= limit {
				return after, errTooFar
			}
			page = min(page, limit-read+1)
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		evs, err := s.events.Replay(st.tenant, st.filter.JobID, after, page)
		if errors.Is(err, eventlog.ErrEvicted) {
			// The log moved past the client while it was being served:
			// as for a client too far behind, it resumes with a reset.
			return after, errTooFar
		}
		for _, e := range evs {
			if limit > 0 && read >= limit {
				return after, errTooFar
			}
			read++
			after = e.Seq
			if !st.filter.Match(e) {
				continue
			}
			if err := sw.write(e.Frame()); err != nil {
				return 0, err
			}
			if st.job && e.Terminal() {
				_ = sw.flush()
				return after, errDone
			}
		}
		if len(evs) < page {
			return after, nil
		}
		if err := sw.flush(); err != nil {
			return 0, err
		}
	}
}
