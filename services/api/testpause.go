package api

import "context"

// Points of the idempotency flow FERRY_API_TEST_PAUSE_AT may name.
const (
	pauseClaimed  = "claimed"  // keys claimed, job not produced
	pauseProduced = "produced" // job produced, key not completed
)

// testPause holds a keyed submission at point until its request ends, when
// Config.TestPauseAt names point. It exists so that the chaos suite can
// SIGKILL the api at exactly that point; production never sets it.
func (s *Service) testPause(ctx context.Context, point string, keyed bool) {
	if !keyed || s.cfg.TestPauseAt != point {
		return
	}
	s.log.WarnContext(ctx, "holding the request for a test (FERRY_API_TEST_PAUSE_AT)", "at", point)
	<-ctx.Done()
}
