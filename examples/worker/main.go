// Command worker is a Ferry worker of your own: it runs the handler of the
// job type example.report (and the built-in handlers) beside a running
// `ferry dev`:
//
//	go run ./examples/worker -dev .ferry/dev.json
//
// or, with the variables of the env file `ferry dev` writes:
//
//	set -a; source .ferry/dev.env; go run ./examples/worker
//
// It serves the `long` pool. Start `ferry dev` with
// FERRY_DEV_WORKER_POOLS=short so that this worker is the only one of that
// pool: a built-in worker has no example.report handler and would
// dead-letter the jobs of that type it received.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/services/worker"
)

// JobType is the job type this worker adds.
const JobType = "example.report"

// reportRequest is the payload of an example.report job.
type reportRequest struct {
	// Rows is how many rows to build, 1 to 1000.
	Rows int `json:"rows"`
	// StepMS is how long one row takes, 0 to 10000 ms (default 100).
	StepMS int `json:"step_ms"`
}

// buildReport builds a report row by row, reporting progress after each,
// and returns a summary. A bad payload is permanent: retrying cannot fix it.
func buildReport(ctx context.Context, job *worker.Job) (any, error) {
	var req reportRequest
	if err := json.Unmarshal(job.Payload, &req); err != nil || req.Rows < 1 || req.Rows > 1000 || req.StepMS < 0 || req.StepMS > 10000 {
		return nil, worker.Permanent(fmt.Errorf("payload must be {\"rows\": 1..1000, \"step_ms\": 0..10000}, got %s", job.Payload))
	}
	step := time.Duration(req.StepMS) * time.Millisecond
	if req.StepMS == 0 {
		step = 100 * time.Millisecond
	}
	sum := 0
	for row := 1; row <= req.Rows; row++ {
		select {
		case <-ctx.Done(): // cancelled, timed out or the worker is stopping
			return nil, ctx.Err()
		case <-time.After(step):
		}
		sum += row * row
		job.Progress(float64(row)*100/float64(req.Rows), fmt.Sprintf("row %d of %d", row, req.Rows))
	}
	return map[string]any{"rows": req.Rows, "sum_of_squares": sum, "attempt": job.Attempt}, nil
}

func main() {
	dev := flag.String("dev", "", "ready file of a running `ferry dev` (e.g. .ferry/dev.json): join that stack")
	flag.Parse()
	if *dev != "" {
		if err := joinDev(*dev); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
	}
	// The long pool, unless FERRY_WORKER_POOL says otherwise.
	if os.Getenv("FERRY_WORKER_POOL") == "" {
		os.Setenv("FERRY_WORKER_POOL", "long")
	}
	service.Main("example-worker", worker.Needs, worker.BuildWith(func(r *worker.Registry) {
		r.Register(JobType, buildReport)
	}))
}

// joinDev makes the environment that of the `ferry dev` whose ready file
// is path: service.Main then connects to its Kafka, Postgres and Redis.
func joinDev(path string) error {
	r, err := devstack.ReadReady(path)
	if err != nil {
		return err
	}
	return r.Setenv()
}
