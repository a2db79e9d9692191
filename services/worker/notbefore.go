package worker

import (
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// awaitNotBefore holds a dispatch the scheduler leased ahead of its due
// time (schema.Dispatch.NotBefore) until that time, so it never starts
// early; its dedup and cancellation checks (admit) run after the wait, so a
// job cancelled meanwhile does not run. It returns false when the worker
// began stopping during the wait: the dispatch is then to be handed back
// unstarted.
func (s *Service) awaitNotBefore(d schema.Dispatch) bool {
	if d.NotBefore == nil {
		return true
	}
	wait := time.Until(*d.NotBefore)
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.stopping:
		return false
	}
}
