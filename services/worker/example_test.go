package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ferryhq/ferry/services/worker"
)

// A handler decodes its payload, reports progress and returns a result.
func ExampleHandlerFunc() {
	greet := func(ctx context.Context, job *worker.Job) (any, error) {
		var p struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(job.Payload, &p); err != nil || p.Name == "" {
			return nil, worker.Permanent(errors.New("payload needs a name"))
		}
		job.Progress(50, "halfway")
		return map[string]string{"greeting": "hello " + p.Name}, nil
	}

	// Call it directly, as a unit test would.
	job := worker.NewJob(worker.Job{ID: "job-1", Attempt: 1, Type: "greet", Payload: json.RawMessage(`{"name":"ada"}`)},
		func(percent float64, message string) { fmt.Printf("progress %v%% %s\n", percent, message) })
	res, err := greet(context.Background(), job)
	fmt.Println(res, err)

	_, err = greet(context.Background(), worker.NewJob(worker.Job{Payload: json.RawMessage(`{}`)}, nil))
	class, _ := worker.ClassOf(err)
	fmt.Println(class, err)
	// Output:
	// progress 50% halfway
	// map[greeting:hello ada] <nil>
	// permanent payload needs a name
}

// The error a handler returns decides its failure class.
func ExampleClassOf() {
	for _, err := range []error{
		errors.New("database unavailable"),
		worker.Permanent(errors.New("invalid address")),
		worker.Retryable(errors.New("rate limited"), 30*time.Second),
		fmt.Errorf("upstream: %w", context.DeadlineExceeded),
	} {
		class, retryAfter := worker.ClassOf(err)
		fmt.Println(class, retryAfter)
	}
	// Output:
	// app_error 0s
	// permanent 0s
	// retryable 30s
	// timeout 0s
}

// Register handlers by job type; a later registration replaces an earlier one.
func ExampleRegistry() {
	reg := worker.NewRegistry()
	reg.Register("email.send", func(ctx context.Context, job *worker.Job) (any, error) { return nil, nil })
	reg.Register("report.build", func(ctx context.Context, job *worker.Job) (any, error) { return nil, nil })
	fmt.Println(reg.Types())
	// Output: [email.send report.build]
}
