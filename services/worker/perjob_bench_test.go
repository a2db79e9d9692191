package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// BenchmarkPerJobOverhead measures what the runtime spends per job beside
// the handler: its logger and its reporter (its started event's timer, not
// the produce), for a job that logs nothing at the usual level and ends
// before its first heartbeat.
// go test -run '^$' -bench PerJobOverhead -benchmem
func BenchmarkPerJobOverhead(b *testing.B) {
	s := &Service{
		log: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
		cfg: Config{Heartbeat: 10 * time.Second, ProgressInterval: 100 * time.Millisecond, StartedDelay: 10 * time.Millisecond, WorkerID: "w1"},
	}
	d := schema.Dispatch{JobRef: schema.JobRef{JobID: "job_0196a3c0-7f1e-7b3a-9f00-0123456789ab", TenantID: "default", Attempt: 1},
		DispatchID: "0196a3c0-7f1e-7b3a-9f00-0123456789ab-1"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		log := s.jobLogger(d.JobRef, ctx, d.DispatchID)
		rep := s.startReporter(ctx, d, func() {})
		log.Debug("job completed")
		rep.stop()
	}
}
