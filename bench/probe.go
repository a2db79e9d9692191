package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/kafkax"
)

// Probe reads what the stack recorded: the status projection (Postgres),
// the lifecycle log (Kafka) and server counters (Postgres, Redis).
type Probe struct {
	pg     *pgxpool.Pool
	kc     *kgo.Client
	kcfg   kafkax.Config
	adm    *kadm.Client
	rdb    *redis.Client
	prefix string
	tenant string
	pid    int // the serving process: CPU is read from its process tree
	// metrics is the serving process's /metrics URL (messageCounts).
	metrics string
}

func openProbe(ctx context.Context, t *Target, prefix string) (*Probe, error) {
	pg, err := pgxpool.New(ctx, t.Postgres)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	// The stack's own TLS and SASL settings (FERRY_KAFKA_TLS*, FERRY_KAFKA_SASL_*)
	// reach a secured cluster the way the services do.
	l := config.NewLoader(nil)
	kcfg := kafkax.Config{Brokers: strings.Split(t.Kafka, ","), ClientID: "ferry-bench", Security: config.LoadKafkaSecurity(l)}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	kc, err := kafkax.NewClient(kcfg)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	p := &Probe{pg: pg, kc: kc, kcfg: kcfg, adm: kadm.NewClient(kc), prefix: prefix, tenant: t.Tenant, pid: t.PID,
		metrics: strings.TrimSuffix(t.API, "/") + "/metrics"}
	if t.Redis != "" {
		opt, err := redis.ParseURL(t.Redis)
		if err != nil {
			return nil, fmt.Errorf("redis: %w", err)
		}
		p.rdb = redis.NewClient(opt)
	}
	p.enableStatements(ctx)
	return p, nil
}

func (p *Probe) Close() {
	p.pg.Close()
	p.kc.Close()
	if p.rdb != nil {
		_ = p.rdb.Close()
	}
}

// Progress counts a workload's jobs in the projection.
type Progress struct {
	Total, Succeeded, Dead int
}

// jobsByTag selects the bench tenant's ($1) jobs carrying one tag ($2).
// tags <> '{}' is the predicate of the partial index jobs_tagged, which
// Postgres uses only when the query states it (it cannot infer it from
// tags @>): without it each probe walked every job of the tenant (~31 ms
// of Postgres after a 100k run), which the bench then counted as the
// workload's own Postgres CPU and rows fetched.
const jobsByTag = `FROM jobs WHERE tenant_id = $1 AND tags @> ARRAY[$2]::text[] AND tags <> '{}'`

// progress counts the jobs carrying tag.
func (p *Probe) progress(ctx context.Context, tag string) (Progress, error) {
	var pr Progress
	err := p.pg.QueryRow(ctx, probeMark+`SELECT count(*), count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'dead')
		`+jobsByTag, p.tenant, tag).Scan(&pr.Total, &pr.Succeeded, &pr.Dead)
	return pr, err
}

// busy reports whether the bench tenant has jobs waiting or running in the
// status projection (false when that cannot be read).
func (p *Probe) busy(ctx context.Context) bool {
	var n int64
	err := p.pg.QueryRow(ctx, probeMark+`SELECT pending + running FROM tenant_job_counts WHERE tenant_id = $1`, p.tenant).Scan(&n)
	return err == nil && n > 0
}

// waitDone polls until want jobs with tag succeeded (or dead), or timeout.
func (p *Probe) waitDone(ctx context.Context, tag string, want int, timeout time.Duration) (Progress, bool) {
	deadline := time.Now().Add(timeout)
	var pr Progress
	for {
		// Counting the tag's jobs scans up to N rows: only do it once the
		// tenant has nothing waiting or running (one row of
		// tenant_job_counts), so polling does not load the Postgres it
		// measures. Workloads run one at a time on the bench tenant.
		if p.busy(ctx) {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return pr, false
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var err error
		pr, err = p.progress(ctx, tag)
		if err == nil && pr.Succeeded+pr.Dead >= want {
			return pr, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return pr, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// JobRow is a job as the status projection recorded it.
type JobRow struct {
	ID           string
	Status       string
	Attempt      int
	CreatedAt    time.Time
	ScheduledFor *time.Time
	StartedAt    *time.Time
	FinishedAt   *time.Time
}

func (p *Probe) jobs(ctx context.Context, tag string) (map[string]JobRow, error) {
	rows, err := p.pg.Query(ctx, probeMark+`SELECT id, status, attempt, created_at, scheduled_for, started_at, finished_at
		`+jobsByTag, p.tenant, tag)
	if err != nil {
		return nil, err
	}
	out := map[string]JobRow{}
	for rows.Next() {
		var r JobRow
		if err := rows.Scan(&r.ID, &r.Status, &r.Attempt, &r.CreatedAt, &r.ScheduledFor, &r.StartedAt, &r.FinishedAt); err != nil {
			return nil, err
		}
		out[r.ID] = r
	}
	return out, rows.Err()
}

// Offsets are end offsets per topic and partition.
type Offsets map[string]map[int32]int64

func (p *Probe) topics() []string {
	var ts []string
	for _, n := range []string{"enqueued", "started", "progress", "completed", "failed", "dlq", "cancelled", "dispatch.short", "dispatch.long"} {
		ts = append(ts, p.prefix+"jobs."+n)
	}
	return append(ts, p.prefix+"workers")
}

func (p *Probe) endOffsets(ctx context.Context) (Offsets, error) {
	lo, err := p.adm.ListEndOffsets(ctx, p.topics()...)
	if err != nil {
		return nil, err
	}
	out := Offsets{}
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out, nil
}

// recordsBetween is the records per topic (short name) from a to b.
func (p *Probe) recordsBetween(a, b Offsets) map[string]int64 {
	out := map[string]int64{}
	for topic, parts := range b {
		var n int64
		for part, end := range parts {
			n += end - a[topic][part]
		}
		out[strings.TrimPrefix(topic, p.prefix)] = n
	}
	return out
}

// Attempts are, per job id, the attempts of its events on one topic.
type Attempts map[string][]int

// readEvents reads topic from the offsets in from to those in to and returns,
// per record key (job id), the attempts of the records.
func (p *Probe) readEvents(ctx context.Context, topic string, from, to Offsets) (Attempts, error) {
	out := Attempts{}
	err := p.scanTopic(ctx, topic, from, to, func(r *kgo.Record) {
		var v struct {
			Attempt int `json:"attempt"`
		}
		_ = json.Unmarshal(r.Value, &v)
		out[string(r.Key)] = append(out[string(r.Key)], v.Attempt)
	})
	return out, err
}

// scanTopic calls fn with every record of topic from the offsets in from to
// those in to, in offset order per partition.
func (p *Probe) scanTopic(ctx context.Context, topic string, from, to Offsets, fn func(*kgo.Record)) error {
	start := map[string]map[int32]kgo.Offset{topic: {}}
	remaining := map[int32]int64{}
	for part, end := range to[topic] {
		s := from[topic][part]
		if end > s {
			start[topic][part] = kgo.NewOffset().At(s)
			remaining[part] = end
		}
	}
	if len(remaining) == 0 {
		return nil
	}
	cl, err := kafkax.NewClient(p.kcfg, kgo.ConsumePartitions(start))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("reading %s: %w", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			fn(r)
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return nil
}

// PGStats are database-wide counters of pg_stat_database, and the
// server's WAL counters (pg_stat_wal): WAL records and bytes are what every
// row and index write costs beside its own page, full-page images the first
// change of a page after a checkpoint.
type PGStats struct {
	XactCommit, TupInserted, TupUpdated, TupDeleted, TupFetched int64
	WALRecords, WALFPI, WALBytes                                int64
}

func (p *Probe) pgStats(ctx context.Context) (PGStats, error) {
	var s PGStats
	// Counters are flushed by backends at most once a second.
	_, _ = p.pg.Exec(ctx, probeMark+`SELECT pg_stat_force_next_flush()`)
	err := p.pg.QueryRow(ctx, probeMark+`SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_fetched
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&s.XactCommit, &s.TupInserted, &s.TupUpdated, &s.TupDeleted, &s.TupFetched)
	if err != nil {
		return s, err
	}
	// pg_stat_wal is server-wide (Postgres 14+); left at zero when absent.
	_ = p.pg.QueryRow(ctx, probeMark+`SELECT wal_records, wal_fpi, wal_bytes::bigint FROM pg_stat_wal`).Scan(&s.WALRecords, &s.WALFPI, &s.WALBytes)
	return s, nil
}

// redisCalls is INFO commandstats: calls per command.
func (p *Probe) redisCalls(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	if p.rdb == nil {
		return out, nil
	}
	s, err := p.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out, nil
}

// redisState is what INFO memory and persistence say about Redis: the
// bytes it holds and how often it has rewritten its append-only file (a
// fork that copies the whole dataset, beside whatever runs).
type redisState struct {
	UsedMemory  int64 `json:"used_memory"`
	AOFRewrites int64 `json:"aof_rewrites"`
}

// redisInfo reads redisState; zero without Redis or when INFO fails.
func (p *Probe) redisInfo(ctx context.Context) redisState {
	var st redisState
	if p.rdb == nil {
		return st
	}
	s, err := p.rdb.Info(ctx, "memory", "persistence").Result()
	if err != nil {
		return st
	}
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "used_memory":
			st.UsedMemory = n
		case "aof_rewrites":
			st.AOFRewrites = n
		}
	}
	return st
}

// redisLine says what Redis held at b and what it gained and rewrote
// between a and b, per job of n.
func redisLine(a, b redisState, n int) string {
	if b.UsedMemory == 0 || n == 0 {
		return ""
	}
	return fmt.Sprintf("redis memory %.0f MiB at the end (%+.0f bytes per job), %d AOF rewrites during the workload",
		float64(b.UsedMemory)/(1<<20), float64(b.UsedMemory-a.UsedMemory)/float64(n), b.AOFRewrites-a.AOFRewrites)
}

// Counters is a snapshot of every server counter the benchmark reads.
type Counters struct {
	At     time.Time
	Kafka  Offsets
	PG     PGStats
	Redis  map[string]int64
	RedisS redisState
	Tables map[string]tableStats
	// Stmts are the stack's statements by kind (statements), nil without
	// pg_stat_statements; StmtDealloc its evictions.
	Stmts       map[string]int64
	StmtDealloc int64
	Own         probeCost // the bench's own statements so far
	// Messages are the serving process's Kafka requests by client and
	// kind and its records decoded and encoded (messageCounts), nil when its
	// /metrics cannot be read.
	Messages map[string]int64
	CPU      CPUTicks // CPU time per component of the stack
	// HostBusy and Bench are the CPU time of the whole machine and of the
	// load generator (this process), for otherLoad.
	HostBusy, Bench int64
}

func (p *Probe) counters(ctx context.Context) Counters {
	c := Counters{At: time.Now(), CPU: cpuTree(p.pid), HostBusy: hostBusyTicks(), Bench: selfTicks()}
	c.Kafka, _ = p.endOffsets(ctx)
	c.Messages = p.messageCounts(ctx)
	c.PG, _ = p.pgStats(ctx)
	c.Redis, _ = p.redisCalls(ctx)
	c.RedisS = p.redisInfo(ctx)
	c.Tables, _ = p.tableStats(ctx)
	c.Stmts, c.Own, c.StmtDealloc = p.statements(ctx)
	return c
}

// pgFlushed re-reads Postgres's statistics into c until they stop moving:
// a backend reports its counts at most once a second, and an idle one only
// after ~10 s, so counters read right after a workload miss the last
// batches' rows. CPU and the other counters stay as c read them.
func (p *Probe) pgFlushed(ctx context.Context, c Counters, limit time.Duration) Counters {
	writes := func(ts map[string]tableStats) (n int64) {
		for _, t := range ts {
			n += t.Writes
		}
		return n
	}
	for deadline := time.Now().Add(limit); time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(time.Second)
		tables, err := p.tableStats(ctx)
		if err != nil {
			return c
		}
		stable := writes(tables) == writes(c.Tables)
		c.Tables = tables
		c.PG, _ = p.pgStats(ctx)
		c.Stmts, c.Own, c.StmtDealloc = p.statements(ctx)
		if stable {
			break
		}
	}
	return c
}

// tableStats are one table's counters of pg_stat_user_tables.
type tableStats struct {
	// Writes are rows inserted + updated + deleted.
	Writes int64
	// Fetched are rows read by index and sequential scans (idx_tup_fetch +
	// seq_tup_read): which table the database-wide tup_fetched comes from.
	Fetched int64
	// SeqRead are the rows of Fetched read by sequential scans: a query
	// planned as a scan of a growing table shows here (a run's Postgres
	// CPU several times the usual has come with 10× the rows fetched).
	SeqRead int64
	// Updates and HOTUpdates: an update is HOT when it changes no indexed
	// column and the new row version fits its page (no index writes).
	Updates, HOTUpdates int64
}

// tableStats reads pg_stat_user_tables; partitions count under their own
// names.
func (p *Probe) tableStats(ctx context.Context) (map[string]tableStats, error) {
	rows, err := p.pg.Query(ctx, probeMark+`SELECT relname, n_tup_ins + n_tup_upd + n_tup_del,
		coalesce(idx_tup_fetch, 0) + seq_tup_read, seq_tup_read, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables`)
	if err != nil {
		return nil, err
	}
	out := map[string]tableStats{}
	var (
		name string
		t    tableStats
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &t.Writes, &t.Fetched, &t.SeqRead, &t.Updates, &t.HOTUpdates}, func() error {
		out[name] = t
		return nil
	})
	return out, err
}

// tableDeltas are the per-table changes between a and b.
func tableDeltas(a, b map[string]tableStats) map[string]tableStats {
	out := map[string]tableStats{}
	for k, v := range b {
		w := a[k]
		out[k] = tableStats{Writes: v.Writes - w.Writes, Fetched: v.Fetched - w.Fetched, SeqRead: v.SeqRead - w.SeqRead,
			Updates: v.Updates - w.Updates, HOTUpdates: v.HOTUpdates - w.HOTUpdates}
	}
	return out
}

// topPerJob formats the six largest positive values of m per job of f.
func topPerJob(m map[string]int64, f float64) string {
	var parts []string
	for _, k := range sortedByValue(m) {
		if len(parts) == 6 || m[k] <= 0 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(m[k])/f))
	}
	return strings.Join(parts, ", ")
}

// perJob formats what happened between a and b per job of n.
func (p *Probe) perJob(a, b Counters, n int) (string, map[string]any) {
	if n == 0 {
		return "", nil
	}
	f := float64(n)
	recs := p.recordsBetween(a.Kafka, b.Kafka)
	var total int64
	var parts []string
	for _, k := range sortedKeys(recs) {
		if recs[k] == 0 {
			continue
		}
		total += recs[k]
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(recs[k])/f))
	}
	redisDelta, rtotal := countDeltas(a.Redis, b.Redis)
	pg := PGStats{
		XactCommit: b.PG.XactCommit - a.PG.XactCommit, TupInserted: b.PG.TupInserted - a.PG.TupInserted,
		TupUpdated: b.PG.TupUpdated - a.PG.TupUpdated, TupDeleted: b.PG.TupDeleted - a.PG.TupDeleted,
		TupFetched: b.PG.TupFetched - a.PG.TupFetched,
		WALRecords: b.PG.WALRecords - a.PG.WALRecords, WALFPI: b.PG.WALFPI - a.PG.WALFPI, WALBytes: b.PG.WALBytes - a.PG.WALBytes,
	}
	s := fmt.Sprintf("per job: kafka records %.2f (%s); ", float64(total)/f, strings.Join(parts, ", "))
	reqs, reqKinds := messagesLine(a.Messages, b.Messages, f)
	if reqs != "" {
		s += reqs + "; "
	}
	s += fmt.Sprintf("redis commands %.2f (%s); postgres commits %.3f, rows inserted %.2f, updated %.2f, fetched %.2f, WAL records %.1f, WAL bytes %.0f, full-page images %.2f",
		float64(rtotal)/f, topPerJob(redisDelta, f),
		float64(pg.XactCommit)/f, float64(pg.TupInserted)/f, float64(pg.TupUpdated)/f, float64(pg.TupFetched)/f,
		float64(pg.WALRecords)/f, float64(pg.WALBytes)/f, float64(pg.WALFPI)/f)
	stmts, stmtKinds := statementsLine(a, b, n)
	if stmts != "" {
		s += ", " + stmts
	}
	deltas := tableDeltas(a.Tables, b.Tables)
	tables, fetched, seq := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for k, d := range deltas {
		tables[k], fetched[k], seq[k] = d.Writes, d.Fetched, d.SeqRead
	}
	jobs := deltas["jobs"]
	s += " (row writes by table: " + topPerJob(tables, f) + "; rows fetched by table: " + topPerJob(fetched, f) +
		"; of them by sequential scan: " + cmp.Or(topPerJob(seq, f), "none") +
		fmt.Sprintf("; jobs updates %.2f, of them HOT %.2f)", float64(jobs.Updates)/f, float64(jobs.HOTUpdates)/f)
	if own := probeLine(a, b); own != "" {
		s += "; " + own
	}
	cpu := microsPerJob(a.CPU, b.CPU, n)
	if len(cpu) > 1 {
		s += "; " + cpuLine(cpu)
	}
	bad := implausibleCPU(a.CPU, b.CPU, b.At.Sub(a.At), runtime.NumCPU())
	if len(bad) > 0 {
		s += fmt.Sprintf(" (IMPLAUSIBLE: %s above what %d cores give in the run, a /proc accounting artifact: rerun before comparing)",
			strings.Join(bad, ", "), runtime.NumCPU())
	}
	other := otherLoad(a, b)
	s += "; " + otherLoadNote(other)
	if r := redisLine(a.RedisS, b.RedisS, n); r != "" {
		s += "; " + r
	}
	detail := map[string]any{"redis_used_memory": b.RedisS.UsedMemory, "redis_memory_per_job": float64(b.RedisS.UsedMemory-a.RedisS.UsedMemory) / f,
		"redis_aof_rewrites": b.RedisS.AOFRewrites - a.RedisS.AOFRewrites, "kafka_records": recs, "table_row_writes": tables, "table_rows_fetched": fetched, "table_seq_rows_read": seq,
		"jobs_updates": jobs.Updates, "jobs_hot_updates": jobs.HOTUpdates, "redis_calls": redisDelta, "postgres": pg, "jobs": n,
		"seconds": b.At.Sub(a.At).Seconds(), "cpu_us_per_job": cpu, "cpu_implausible": bad,
		"other_cpu_pct": other, "postgres_statements": stmtKinds, "messages": reqKinds}
	return s, detail
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// countDeltas are the counters of b that grew since a (by how much) and
// the sum of that growth.
func countDeltas(a, b map[string]int64) (map[string]int64, int64) {
	out := map[string]int64{}
	var total int64
	for k, v := range b {
		if d := v - a[k]; d > 0 {
			out[k] = d
			total += d
		}
	}
	return out, total
}

func sortedByValue(m map[string]int64) []string {
	ks := sortedKeys(m)
	sort.SliceStable(ks, func(i, j int) bool { return m[ks[i]] > m[ks[j]] })
	return ks
}

// auditRows counts audit rows of one type in [from, to).
func (p *Probe) auditRows(ctx context.Context, typ string, from, to time.Time) (int, error) {
	var n int
	err := p.pg.QueryRow(ctx, probeMark+`SELECT count(*) FROM audit_events WHERE tenant_id = $1 AND type = $2 AND occurred_at >= $3 AND occurred_at < $4`,
		p.tenant, typ, from, to).Scan(&n)
	return n, err
}

var _ = pgx.ErrNoRows

// projectionLag is the number of records the exactly-once projections
// (api status, sse-bridge, audit, webhooks, dlq: offsets in ferry_offsets)
// have yet to apply, summed over every projection and partition it reads.
func (p *Probe) projectionLag(ctx context.Context) (int64, error) {
	end, err := p.endOffsets(ctx)
	if err != nil {
		return 0, err
	}
	rows, err := p.pg.Query(ctx, probeMark+`SELECT consumer_group, topic, partition, next_offset FROM ferry_offsets`)
	if err != nil {
		return 0, err
	}
	next := map[string]Offsets{}
	for rows.Next() {
		var group, topic string
		var part int32
		var off int64
		if err := rows.Scan(&group, &topic, &part, &off); err != nil {
			rows.Close()
			return 0, err
		}
		if next[group] == nil {
			next[group] = Offsets{}
		}
		if next[group][topic] == nil {
			next[group][topic] = map[int32]int64{}
		}
		next[group][topic][part] = off
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var lag int64
	for _, topics := range next {
		for topic, parts := range topics {
			for part, e := range end[topic] {
				lag += max(e-parts[part], 0) // a partition with no row yet: everything
			}
		}
	}
	return lag, nil
}

// settle waits, up to limit, until the projections have applied every
// record, so a workload does not measure the previous one's catch-up.
func (p *Probe) settle(ctx context.Context, limit time.Duration) (waited time.Duration, lag int64, err error) {
	start := time.Now()
	for {
		lag, err = p.projectionLag(ctx)
		if err != nil || lag == 0 || time.Since(start) > limit || ctx.Err() != nil {
			return time.Since(start), lag, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
