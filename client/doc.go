// Package client is the Go client of Ferry's HTTP API: submit jobs, follow
// them live, wait for them, list and cancel them, and manage the dead-letter
// queue and webhooks. It uses the standard library only.
//
// # A short tour
//
//	c, err := client.New("http://127.0.0.1:8080", os.Getenv("FERRY_API_KEY"))
//
//	// Submit: an Idempotency-Key is always sent (random unless given), so
//	// retries after 429, 503 or a lost connection never make a second job.
//	res, err := c.Submit(ctx, client.JobRequest{
//		Type:    "email.send",
//		Payload: map[string]string{"to": "a@example.com"},
//	}, client.WithIdempotencyKey("welcome-42"))
//	// res.Deduplicated: an earlier request with this key made the job.
//
//	// Follow it live; a dropped connection resumes with Last-Event-ID.
//	for ev, err := range c.JobEvents(ctx, res.Job.ID, nil) {
//		if err != nil { ... }
//		fmt.Println(ev.Type, string(ev.Data))
//	}
//
//	// Or just wait for the end (event stream, polling as a fallback).
//	job, err := c.Wait(ctx, res.Job.ID, nil)
//
//	// Every page of a filtered list.
//	for job, err := range c.Jobs(ctx, client.ListOptions{Status: client.StatusDead}) { ... }
//
// # Errors
//
// Error answers are *APIError with the API's stable Code; errors.Is matches
// them against the sentinels (ErrNotFound, ErrValidation, ErrRateLimited,
// ErrIdempotencyConflict, ErrInFlight, ErrJobFinished, ErrTooLarge,
// ErrUnauthorized, ErrForbidden, ErrUnavailable). A request whose answer
// never arrived is a *NetworkError.
//
// # Retries
//
// RetryPolicy (WithRetry) says how often: answers meaning "nothing was
// done, try again" (429, 503, a request with the same key still in flight)
// are retried after their Retry-After, or after an exponential backoff with
// jitter. Network errors are retried only for calls that are safe to repeat.
//
// # Operators
//
// The operator (admin) key acts for a tenant with WithTenant.
package client
