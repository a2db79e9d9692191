package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Breaker is the circuit breaker of one of the tenant's job types
// (docs/flow-control.md).
type Breaker struct {
	Type string `json:"type"`
	// State is "closed", "open" or "half_open".
	State string `json:"state"`
	// OpenUntil is when an open breaker lets its probe through.
	OpenUntil *time.Time `json:"open_until,omitempty"`
	// Failures are the counted failures in the current window.
	Failures int64 `json:"failures"`
	// Waiting are the jobs of the type parked while the breaker is not closed.
	Waiting int64 `json:"waiting"`
}

// Breakers lists the tenant's circuit breakers.
func (c *Client) Breakers(ctx context.Context) ([]Breaker, error) {
	cl, err := newCall(http.MethodGet, "/v1/breakers", nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Breakers []Breaker `json:"breakers"`
	}
	if _, err := c.decode(ctx, cl, &out); err != nil {
		return nil, err
	}
	return out.Breakers, nil
}

// ResetBreaker closes the breaker of jobType at once and returns the state
// it was in.
func (c *Client) ResetBreaker(ctx context.Context, jobType string) (previous string, err error) {
	cl, err := newCall(http.MethodPost, "/v1/breakers/"+url.PathEscape(jobType)+"/reset", nil)
	if err != nil {
		return "", err
	}
	cl.idempotent = true // resetting twice closes it once
	var out struct {
		PreviousState string `json:"previous_state"`
	}
	if _, err := c.decode(ctx, cl, &out); err != nil {
		return "", err
	}
	return out.PreviousState, nil
}
