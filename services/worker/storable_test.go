package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/worker"
)

// TestHandlerOutputIsStorable: a handler's result, error and progress
// message reach Kafka in a form every projection can store (no NUL, valid
// UTF-8, numbers in range, bounded messages); the job still completes.
func TestHandlerOutputIsStorable(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start(worker.Config{}, func(r *worker.Registry) {
		r.Register("nul-result", func(context.Context, *worker.Job) (any, error) {
			return map[string]any{"s": "a\x00b", "k\x00": 1, "n": json.Number("1e400")}, nil
		})
		r.Register("nul-raw", func(context.Context, *worker.Job) (any, error) {
			return json.RawMessage("{\"a\":\"\\u0000\",\"b\":\"\xff\",\"c\":[\"\\ud800\"]}"), nil
		})
		r.Register("nul-error", func(context.Context, *worker.Job) (any, error) {
			return nil, errors.New("bad\x00\xff" + strings.Repeat("é", 5000))
		})
		r.Register("html-error", func(context.Context, *worker.Job) (any, error) {
			return nil, errors.New(strings.Repeat("<", 5000))
		})
		r.Register("nul-progress", func(_ context.Context, job *worker.Job) (any, error) {
			job.Progress(50, "half\x00way\xff"+strings.Repeat("x", 5000))
			return nil, nil
		})
	})

	c := b.completed(b.dispatch("nul-result", nil))
	var res map[string]any
	if err := schema.CheckJSON(c.Result); err != nil || json.Unmarshal(c.Result, &res) != nil ||
		res["s"] != "a\uFFFDb" || res["k\uFFFD"] != 1.0 || res["n"] != "1e400" {
		t.Errorf("result %s: %v", c.Result, schema.CheckJSON(c.Result))
	}
	c = b.completed(b.dispatch("nul-raw", nil))
	if err := schema.CheckJSON(c.Result); err != nil {
		t.Errorf("raw result %s: %v", c.Result, err)
	}

	f := b.failed(b.dispatch("nul-error", nil))
	if err := schema.CheckText(f.Error.Message); err != nil || len(f.Error.Message) > 4096+len("…") || !strings.HasPrefix(f.Error.Message, "bad\uFFFD\uFFFD") {
		t.Errorf("error message (%d bytes) %.40q: %v", len(f.Error.Message), f.Error.Message, err)
	}

	// The bound holds on the message as encoded ('<' is 6 bytes): it is
	// repeated in every retry's and the dlq event's history.
	f = b.failed(b.dispatch("html-error", nil))
	if enc, _ := json.Marshal(f.Error.Message); len(enc) > 4096 {
		t.Errorf("error message encodes to %d bytes", len(enc))
	}

	d := b.dispatch("nul-progress", nil)
	ev := b.waitFor("progress of "+d.JobID, ofJob[schema.Progress](d.JobID))
	if p := ev.Data.(schema.Progress); schema.CheckText(p.Message) != nil || len(p.Message) > 1024+len("…") || !strings.HasPrefix(p.Message, "half\uFFFDway\uFFFD") {
		t.Errorf("progress message (%d bytes) %.40q", len(p.Message), p.Message)
	}
}
