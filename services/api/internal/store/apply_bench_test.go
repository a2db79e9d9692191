package store

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
)

// BenchmarkApply projects b.N jobs the way a busy pipeline delivers them:
// batches of 100 enqueued events, then a batch of those jobs' started and
// completed events (one insert and one update per job). Beside the Go
// figures it reports the CPU the database's backends spent per job
// (pg-cpu-µs/job, from /proc, so only when Postgres runs on this machine)
// and the WAL records and bytes written per job (pg_stat_wal: the whole
// server's, so exact only when nothing else writes to it meanwhile).
//
//	go test -run - -bench Apply -benchmem -benchtime 3000x ./services/api/internal/store
func BenchmarkApply(b *testing.B) {
	s := open(b)
	tenant := "bench" + strconv.Itoa(b.N)
	const batch = 100
	var batches [][]*kgo.Record
	for lo := 0; lo < b.N; lo += batch {
		var enq, done []*kgo.Record
		for i := lo; i < min(lo+batch, b.N); i++ {
			enq, done = benchJob(b, tenant, i, enq, done)
		}
		batches = append(batches, enq, done)
	}
	pgBefore, walBefore := backendCPU(b, s), walStats(b, s)
	b.ResetTimer()
	for _, recs := range batches {
		s.applyTx(b, recs)
	}
	b.StopTimer()
	if used := backendCPU(b, s) - pgBefore; used >= 0 {
		b.ReportMetric(float64(used.Microseconds())/float64(b.N), "pg-cpu-µs/job")
	}
	wal := walStats(b, s)
	b.ReportMetric(float64(wal[0]-walBefore[0])/float64(b.N), "wal-records/job")
	b.ReportMetric(float64(wal[1]-walBefore[1])/float64(b.N), "wal-bytes/job")
}

// walStats are the server's WAL records and bytes so far (pg_stat_wal).
func walStats(b *testing.B, s *Store) [2]int64 {
	var w [2]int64
	if err := s.pool.QueryRow(context.Background(), `SELECT wal_records, wal_bytes::bigint FROM pg_stat_wal`).Scan(&w[0], &w[1]); err != nil {
		b.Fatal(err)
	}
	return w
}

// benchJob appends job i's enqueued event to enq and its started and
// completed events to done.
func benchJob(b testing.TB, tenant string, i int, enq, done []*kgo.Record) ([]*kgo.Record, []*kgo.Record) {
	t0 := time.Now().UTC()
	ref := schema.JobRef{JobID: fmt.Sprintf("job_%07d", i), TenantID: tenant, Attempt: 1}
	spec := schema.JobSpec{Type: "x", Queue: "q", Payload: json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`), MaxAttempts: 3, Tags: []string{"bench"}, Pool: "short"}
	enq = append(enq, record(b, schema.Enqueued{JobRef: ref, Job: spec, CreatedAt: t0, RunAt: t0, Reason: "submitted"}, t0))
	done = append(done,
		record(b, schema.Started{JobRef: ref, WorkerID: "w", StartedAt: t0}, t0),
		record(b, schema.Completed{JobRef: ref, WorkerID: "w", StartedAt: t0, FinishedAt: t0.Add(time.Millisecond)}, t0.Add(time.Millisecond)))
	return enq, done
}

// backendCPU is the CPU time (user + system) of the database's server
// processes so far, read from /proc; -1 when they are not visible here.
func backendCPU(b *testing.B, s *Store) time.Duration {
	rows, err := s.pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	defer rows.Close()
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return -1
		}
		// Fields after the command name (which may hold spaces): utime
		// and stime are the 12th and 13th, in clock ticks (100 a second).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		ut, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		total += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return total
}
