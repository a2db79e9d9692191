package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/ferryhq/ferry/events/schema"
)

// TestJobLoggerAddsTheJobsAttributes: a line logged through jobLogger
// carries the job's attributes, as slog's With would add them, also
// through a derived logger; a disabled level formats nothing.
func TestJobLoggerAddsTheJobsAttributes(t *testing.T) {
	var buf bytes.Buffer
	s := &Service{log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	log := s.jobLogger(schema.JobRef{JobID: "job_1", TenantID: "t1", Attempt: 2}, context.Background(), "d-1")
	log.Debug("not logged")
	if buf.Len() != 0 {
		t.Fatalf("a debug line was written: %s", buf.String())
	}
	log.Info("hello", "k", "v")
	log.With("extra", 1).Warn("derived")
	dec := json.NewDecoder(&buf)
	for _, want := range []map[string]any{{"msg": "hello", "k": "v"}, {"msg": "derived", "extra": float64(1)}} {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			t.Fatal(err)
		}
		want["job_id"], want["tenant_id"], want["attempt"], want["dispatch_id"] = "job_1", "t1", float64(2), "d-1"
		for k, v := range want {
			if line[k] != v {
				t.Errorf("%s = %v in %v, want %v", k, line[k], line, v)
			}
		}
	}
}
