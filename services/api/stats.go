package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/httpx"
)

// throughputRetention is how long per-minute outcomes are kept; the
// longest window GET /v1/stats/throughput serves.
const throughputRetention = 24 * time.Hour

// handleThroughput answers the caller's jobs finished per minute, by
// outcome, over the last `minutes` minutes (default 60, at most 1440): one
// row per minute from a small per-minute table the status projection keeps,
// never a count over the jobs table.
func (s *Service) handleThroughput(w http.ResponseWriter, r *http.Request) {
	p, _ := auth.FromContext(r.Context())
	minutes := 60
	if v := r.URL.Query().Get("minutes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > int(throughputRetention/time.Minute) {
			e := httpx.Errorf(http.StatusBadRequest, "invalid_parameter", "minutes must be a whole number from 1 to %d", int(throughputRetention/time.Minute))
			e.Fields = map[string]string{"minutes": "must be from 1 to 1440"}
			httpx.WriteError(w, r, e)
			return
		}
		minutes = n
	}
	now := s.cfg.Now().UTC()
	out, err := s.store.Throughput(r.Context(), p.TenantID, now.Add(-time.Duration(minutes-1)*time.Minute), now)
	if err != nil {
		httpx.WriteError(w, r, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"minutes": out})
}
