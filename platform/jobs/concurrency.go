package jobs

import (
	"fmt"

	"github.com/ferryhq/ferry/events/schema"
)

// ConcurrencyRequest is a job's concurrency key: at most Limit jobs of the
// tenant carrying Key run at once across the cluster; the others wait in
// order (docs/flow-control.md).
type ConcurrencyRequest struct {
	Key   string `json:"key"`
	Limit *int   `json:"limit,omitempty"`
}

// Bounds of a concurrency key.
const (
	DefaultConcurrencyLimit = 1
	MaxConcurrencyLimit     = 10_000
)

func (v *validation) concurrency(req *ConcurrencyRequest, spec *schema.JobSpec) {
	if req == nil {
		return
	}
	c := &schema.Concurrency{Key: req.Key, Limit: DefaultConcurrencyLimit}
	if !ValidConcurrencyKey(req.Key) {
		v.bad["concurrency.key"] = concurrencyRule
	}
	if req.Limit != nil {
		if *req.Limit < 1 || *req.Limit > MaxConcurrencyLimit {
			v.bad["concurrency.limit"] = fmt.Sprintf("must be between 1 and %d", MaxConcurrencyLimit)
		}
		c.Limit = *req.Limit
	}
	spec.Concurrency = c
}
