// Command submit submits an example.report job with the Go client and
// follows it live over Server-Sent Events until it finishes:
//
//	go run ./examples/submit -dev .ferry/dev.json -rows 20
//
// It reads the API URL and key from the ready file of `ferry dev`, else
// from FERRY_URL and FERRY_API_KEY. Running it again with the same
// -idempotency-key submits nothing new: it follows the job the first run
// made. It exits 0 only if the job succeeded.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/ferryhq/ferry/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "submit:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	dev := fs.String("dev", "", "ready file of a running `ferry dev` (e.g. .ferry/dev.json)")
	rows := fs.Int("rows", 10, "rows of the report")
	stepMS := fs.Int("step-ms", 100, "milliseconds per row")
	key := fs.String("idempotency-key", "", "Idempotency-Key of the submission (default: a new one per run)")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up following the job after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := newClient(*dev)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	opts := []client.SubmitOption{}
	if *key != "" {
		opts = append(opts, client.WithIdempotencyKey(*key))
	}
	res, err := c.Submit(ctx, client.JobRequest{
		Type:    "example.report",
		Pool:    "long", // where examples/worker runs
		Payload: map[string]int{"rows": *rows, "step_ms": *stepMS},
		Tags:    []string{"example"},
	}, opts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "submitted %s (Idempotency-Key %s, deduplicated %v)\n", res.Job.ID, res.IdempotencyKey, res.Deduplicated)
	return follow(ctx, c, res.Job.ID, out)
}

// follow prints the job's events as they happen, from its first, then the
// finished job; it fails unless the job succeeded.
func follow(ctx context.Context, c *client.Client, id string, out io.Writer) error {
	for ev, err := range c.JobEvents(ctx, id, nil) {
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "event %-9s attempt %d %s\n", ev.Type, ev.Attempt, eventDetail(ev))
	}
	// The status projection may show the final event a moment after the
	// stream did.
	job, err := c.Wait(ctx, id, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "job %s %s result %s\n", job.ID, job.Status, job.Result)
	if job.Status != client.StatusSucceeded {
		return errors.New("the job did not succeed")
	}
	return nil
}

// eventDetail is the part of an event's data worth a line: progress, the
// error of a failure.
func eventDetail(ev client.Event) string {
	var d struct {
		Percent *float64 `json:"percent"`
		Message string   `json:"message"`
		Error   *struct {
			Class, Message string
		} `json:"error"`
	}
	_ = json.Unmarshal(ev.Data, &d)
	switch {
	case d.Percent != nil:
		return fmt.Sprintf("%.0f%% %s", *d.Percent, d.Message)
	case d.Error != nil:
		return d.Error.Class + ": " + d.Error.Message
	}
	return ""
}

// newClient reads the API URL and key from the ready file of `ferry dev`,
// else from FERRY_URL and FERRY_API_KEY.
func newClient(readyFile string) (*client.Client, error) {
	url, key := os.Getenv("FERRY_URL"), os.Getenv("FERRY_API_KEY")
	if readyFile != "" {
		b, err := os.ReadFile(readyFile)
		if err != nil {
			return nil, err
		}
		var r struct {
			APIURL string `json:"api_url"`
			APIKey string `json:"api_key"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", readyFile, err)
		}
		url, key = r.APIURL, r.APIKey
	}
	if url == "" {
		return nil, errors.New("no API: give -dev .ferry/dev.json or set FERRY_URL and FERRY_API_KEY")
	}
	return client.New(url, key, client.WithUserAgent("ferry-example-submit"))
}
