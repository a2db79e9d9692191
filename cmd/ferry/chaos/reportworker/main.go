// Command reportworker is a worker with an application's registry and no
// built-in handler: it runs only jobs of type report.build. The chaos suite
// runs it beside ferry-worker (built-in handlers only), as a team would run
// its own worker in the same pool, to check that type-aware routing sends
// each job only to a worker that handles its type.
package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/worker"
)

func main() {
	service.Main("worker", worker.Needs, func(_ context.Context, deps *service.Deps, l *config.Loader) (service.Component, error) {
		reg := worker.NewRegistry()
		reg.Register("report.build", buildReport)
		return worker.New(deps, worker.LoadConfig(l), reg)
	})
}

// buildReport takes payload.ms milliseconds, reporting progress halfway.
func buildReport(ctx context.Context, job *worker.Job) (any, error) {
	var p struct {
		MS int `json:"ms"`
	}
	if err := json.Unmarshal(job.Payload, &p); err != nil {
		return nil, worker.Permanent(err)
	}
	half := time.Duration(p.MS) * time.Millisecond / 2
	for range 2 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(half):
		}
		job.Progress(50, "half built")
	}
	return map[string]any{"report": job.ID}, nil
}
