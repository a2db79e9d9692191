package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// job is the job resource of the API (DESIGN §6). Times are kept as the
// RFC 3339 strings the server sent.
type job struct {
	ID           string          `json:"id"`
	TenantID     string          `json:"tenant_id"`
	Type         string          `json:"type"`
	Queue        string          `json:"queue"`
	Priority     *int            `json:"priority"`
	Status       string          `json:"status"`
	Attempt      int             `json:"attempt"`
	MaxAttempts  int             `json:"max_attempts"`
	Tags         []string        `json:"tags"`
	CreatedAt    string          `json:"created_at"`
	ScheduledFor string          `json:"scheduled_for"`
	StartedAt    string          `json:"started_at"`
	FinishedAt   string          `json:"finished_at"`
	Progress     *progress       `json:"progress"`
	Result       json.RawMessage `json:"result"`
	LastError    *jobError       `json:"last_error"`
	TraceID      string          `json:"trace_id"`
	RedrivenFrom string          `json:"redriven_from"`
	Deduplicated bool            `json:"deduplicated"`
}

type progress struct {
	Percent *float64 `json:"percent"`
	Message string   `json:"message"`
}

type jobError struct {
	Class   string `json:"class"`
	Message string `json:"message"`
}

// terminal reports whether a job in status will not change any more.
func terminal(status string) bool {
	switch status {
	case "succeeded", "dead", "cancelled":
		return true
	}
	return false
}

// submitRequest is the body of POST /v1/jobs (DESIGN §3).
type submitRequest struct {
	Type        string          `json:"type"`
	Queue       string          `json:"queue,omitempty"`
	Priority    *int            `json:"priority,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	RunAt       string          `json:"run_at,omitempty"`
	Delay       string          `json:"delay,omitempty"`
	MaxAttempts *int            `json:"max_attempts,omitempty"`
	Timeout     string          `json:"timeout,omitempty"`
	NotAfter    string          `json:"not_after,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	Pool        string          `json:"pool,omitempty"`
	Unique      *uniqueRequest  `json:"unique,omitempty"`
}

// uniqueRequest is a submission's unique key (docs/unique-jobs.md).
type uniqueRequest struct {
	Key   string `json:"key"`
	While string `json:"while,omitempty"`
	TTL   string `json:"ttl,omitempty"`
}

// uniqueFlags are submit's --unique-* flags.
type uniqueFlags struct{ key, while, ttl string }

func (u *uniqueFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&u.key, "unique-key", "", "unique key: while a job with it is in the --unique-while state, submitting again answers that job")
	fs.StringVar(&u.while, "unique-while", "", "queued, active or until_done (server default: until_done)")
	fs.StringVar(&u.ttl, "unique-ttl", "", "longest the unique key holds (e.g. 1h; server default: 24h)")
}

// request is the unique key to send, nil without --unique-key.
func (u *uniqueFlags) request() (*uniqueRequest, error) {
	if u.key == "" {
		if u.while != "" || u.ttl != "" {
			return nil, errors.New("--unique-while and --unique-ttl need --unique-key")
		}
		return nil, nil
	}
	return &uniqueRequest{Key: u.key, While: u.while, TTL: u.ttl}, nil
}

const submitDoc = `Submits a job. With --wait, polls the job until it is succeeded, dead or
cancelled, prints it, and exits 0 only if it succeeded.`

func (r *runner) submit(args []string) int {
	fs, c := r.newFlagSet("submit", "--type TYPE [flags]", submitDoc)
	var (
		req            submitRequest
		payload        string
		priority       int
		maxAttempts    int
		delay, timeout durationString
		runAt, notAft  timeString
		tags           stringList
		idemKey        string
		unique         uniqueFlags
		wait           bool
		waitInterval   time.Duration
	)
	fs.StringVar(&req.Type, "type", "", "handler name (required)")
	fs.StringVar(&payload, "payload", "", "JSON payload, or @FILE to read it from a file")
	fs.StringVar(&req.Queue, "queue", "", "queue (server default: default)")
	fs.IntVar(&priority, "priority", 5, "priority, 0 most urgent … 9 least")
	fs.Var(&delay, "delay", "run after this duration (e.g. 30s)")
	fs.Var(&runAt, "run-at", "run at this RFC 3339 time")
	fs.IntVar(&maxAttempts, "max-attempts", 5, "attempts before dead-lettering")
	fs.Var(&timeout, "timeout", "per-attempt timeout (e.g. 2m)")
	fs.Var(&notAft, "not-after", "RFC 3339 deadline; past it the job is dead-lettered as expired")
	fs.Var(&tags, "tag", "tag (repeatable)")
	fs.StringVar(&req.Pool, "pool", "", "worker pool: short or long")
	fs.StringVar(&idemKey, "idempotency-key", "", "Idempotency-Key header")
	unique.register(fs)
	fs.BoolVar(&wait, "wait", false, "wait until the job is succeeded, dead or cancelled")
	fs.DurationVar(&waitInterval, "wait-interval", 500*time.Millisecond, "poll interval of --wait")

	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q", pos[0])
	}
	if strings.TrimSpace(req.Type) == "" {
		return usageError(fs, "--type is required")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["priority"] {
		if priority < 0 || priority > 9 {
			return usageError(fs, "--priority must be between 0 and 9")
		}
		req.Priority = &priority
	}
	if set["max-attempts"] {
		if maxAttempts < 1 {
			return usageError(fs, "--max-attempts must be at least 1")
		}
		req.MaxAttempts = &maxAttempts
	}
	if set["delay"] && set["run-at"] {
		return usageError(fs, "--delay and --run-at are mutually exclusive")
	}
	if req.Pool != "" && req.Pool != "short" && req.Pool != "long" {
		return usageError(fs, "--pool must be short or long")
	}
	if waitInterval <= 0 {
		return usageError(fs, "--wait-interval must be positive")
	}
	if set["payload"] {
		raw := []byte(payload)
		if name, ok := strings.CutPrefix(payload, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				return usageError(fs, "--payload: %v", err)
			}
			raw = b
		}
		raw = bytes.TrimSpace(raw)
		if !json.Valid(raw) {
			return usageError(fs, "--payload is not valid JSON")
		}
		req.Payload = raw
	}
	req.Delay, req.Timeout = string(delay), string(timeout)
	req.RunAt, req.NotAfter = string(runAt), string(notAft)
	req.Tags = tags
	uq, err := unique.request()
	if err != nil {
		return usageError(fs, "%v", err)
	}
	req.Unique = uq

	cl, err := r.client(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return r.fail(err)
	}
	var h http.Header
	if idemKey != "" {
		h = http.Header{"Idempotency-Key": {idemKey}}
	}
	raw, err := cl.do(r.ctx, http.MethodPost, "/v1/jobs", nil, body, h)
	if err != nil {
		return r.fail(err)
	}
	if !wait {
		return r.printJob(c, raw)
	}

	var j job
	if err := json.Unmarshal(raw, &j); err != nil {
		return r.fail(fmt.Errorf("decoding job: %w", err))
	}
	if j.ID == "" {
		return r.fail(fmt.Errorf("submit answer has no job id"))
	}
	if !c.json {
		fmt.Fprintf(r.stderr, "submitted %s (%s), waiting…\n", j.ID, j.Status)
	}
	path := "/v1/jobs/" + url.PathEscape(j.ID)
	t := time.NewTicker(waitInterval)
	defer t.Stop()
	for !terminal(j.Status) {
		select {
		case <-r.ctx.Done():
			return r.fail(fmt.Errorf("waiting for job %s: %w", j.ID, r.ctx.Err()))
		case <-t.C:
		}
		raw, err = cl.do(r.ctx, http.MethodGet, path, nil, nil, nil)
		if err != nil {
			return r.fail(err)
		}
		j = job{}
		if err := json.Unmarshal(raw, &j); err != nil {
			return r.fail(fmt.Errorf("decoding job: %w", err))
		}
	}
	if code := r.printJob(c, raw); code != exitOK {
		return code
	}
	if j.Status != "succeeded" {
		return exitError
	}
	return exitOK
}

func (r *runner) get(args []string) int {
	fs, c := r.newFlagSet("get", "ID [flags]", "Shows a job.")
	return r.oneJob(fs, c, args, http.MethodGet, "")
}

func (r *runner) cancel(args []string) int {
	fs, c := r.newFlagSet("cancel", "ID [flags]", "Cancels a job and shows it.")
	return r.oneJob(fs, c, args, http.MethodPost, "/cancel")
}

// oneJob runs a command taking one job ID: method /v1/jobs/{id}<suffix>.
func (r *runner) oneJob(fs *flag.FlagSet, c *common, args []string, method, suffix string) int {
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) == 0:
		return usageError(fs, "missing job ID")
	case len(pos) > 1:
		return usageError(fs, "unexpected argument %q", pos[1])
	case strings.TrimSpace(pos[0]) == "":
		return usageError(fs, "empty job ID")
	}
	cl, err := r.client(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	raw, err := cl.do(r.ctx, method, "/v1/jobs/"+url.PathEscape(pos[0])+suffix, nil, nil, nil)
	if err != nil {
		return r.fail(err)
	}
	return r.printJob(c, raw)
}

// jobList is the answer of GET /v1/jobs.
type jobList struct {
	Jobs       []json.RawMessage `json:"jobs"`
	NextCursor string            `json:"next_cursor"`
}

const listDoc = `Lists jobs, newest first as the server orders them. With --all, follows
next_cursor until the last page (--limit is then the page size).`

func (r *runner) list(args []string) int {
	fs, c := r.newFlagSet("list", "[flags]", listDoc)
	var (
		status, typ, queue, cursor string
		tags                       stringList
		limit                      int
		all                        bool
	)
	fs.StringVar(&status, "status", "", "only jobs in this status (queued, scheduled, running, succeeded, dead, cancelled)")
	fs.StringVar(&typ, "type", "", "only jobs of this type")
	fs.StringVar(&queue, "queue", "", "only jobs in this queue")
	fs.Var(&tags, "tag", "only jobs with this tag (repeatable)")
	fs.IntVar(&limit, "limit", 0, "page size (server default when 0)")
	fs.StringVar(&cursor, "cursor", "", "continue from this next_cursor")
	fs.BoolVar(&all, "all", false, "follow next_cursor and list every page")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q", pos[0])
	}
	if limit < 0 {
		return usageError(fs, "--limit must not be negative")
	}
	cl, err := r.client(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	q := url.Values{}
	for k, v := range map[string]string{"status": status, "type": typ, "queue": queue} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for _, t := range tags {
		q.Add("tag", t)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}

	var (
		items []json.RawMessage
		next  string
		seen  = map[string]bool{}
	)
	for {
		if cursor != "" {
			q.Set("cursor", cursor)
		} else {
			q.Del("cursor")
		}
		raw, err := cl.do(r.ctx, http.MethodGet, "/v1/jobs", q, nil, nil)
		if err != nil {
			return r.fail(err)
		}
		if c.json && !all {
			return r.writeRaw(raw)
		}
		var page jobList
		if err := json.Unmarshal(raw, &page); err != nil {
			return r.fail(fmt.Errorf("decoding job list: %w", err))
		}
		items = append(items, page.Jobs...)
		next = page.NextCursor
		if !all || next == "" {
			break
		}
		if seen[next] {
			return r.fail(fmt.Errorf("server repeated cursor %q", next))
		}
		seen[next] = true
		cursor = next
	}

	if c.json { // --all: one document with every page's jobs
		if items == nil {
			items = []json.RawMessage{}
		}
		b, err := json.Marshal(jobList{Jobs: items})
		if err != nil {
			return r.fail(err)
		}
		return r.writeRaw(b)
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tTYPE\tQUEUE\tPRI\tATTEMPT\tCREATED")
	for _, it := range items {
		var j job
		if err := json.Unmarshal(it, &j); err != nil {
			return r.fail(fmt.Errorf("decoding job: %w", err))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			dash(j.ID), dash(j.Status), dash(j.Type), dash(j.Queue), priorityText(j.Priority),
			attemptText(j), dash(j.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return r.fail(err)
	}
	if next != "" && !all {
		fmt.Fprintf(r.stderr, "more: --cursor %s (or --all)\n", next)
	}
	return exitOK
}

// printJob prints a job answer: raw with --json, else a short block.
func (r *runner) printJob(c *common, raw []byte) int {
	if c.json {
		return r.writeRaw(raw)
	}
	var j job
	if err := json.Unmarshal(raw, &j); err != nil {
		return r.fail(fmt.Errorf("decoding job: %w", err))
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 1, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	line("id", dash(j.ID))
	line("status", dash(j.Status))
	if j.Deduplicated {
		line("deduplicated", "true")
	}
	line("type", dash(j.Type))
	line("queue", dash(j.Queue))
	line("priority", priorityText(j.Priority))
	line("attempt", attemptText(j))
	if len(j.Tags) > 0 {
		line("tags", strings.Join(j.Tags, ", "))
	}
	line("created", dash(j.CreatedAt))
	if j.ScheduledFor != "" {
		line("scheduled", j.ScheduledFor)
	}
	line("started", dash(j.StartedAt))
	line("finished", dash(j.FinishedAt))
	if p := j.Progress; p != nil && (p.Percent != nil || p.Message != "") {
		var s []string
		if p.Percent != nil {
			s = append(s, strconv.FormatFloat(*p.Percent, 'f', -1, 64)+"%")
		}
		if p.Message != "" {
			s = append(s, p.Message)
		}
		line("progress", strings.Join(s, " "))
	}
	if e := j.LastError; e != nil && (e.Class != "" || e.Message != "") {
		switch {
		case e.Class == "":
			line("last_error", e.Message)
		case e.Message == "":
			line("last_error", e.Class)
		default:
			line("last_error", e.Class+": "+e.Message)
		}
	}
	if len(j.Result) > 0 && string(j.Result) != "null" {
		line("result", plain(j.Result))
	}
	if j.RedrivenFrom != "" {
		line("redriven_from", j.RedrivenFrom)
	}
	if err := tw.Flush(); err != nil {
		return r.fail(err)
	}
	return exitOK
}

// writeRaw writes a JSON body to stdout, ending with a newline.
func (r *runner) writeRaw(raw []byte) int {
	raw = bytes.TrimRight(raw, "\r\n")
	if _, err := fmt.Fprintf(r.stdout, "%s\n", raw); err != nil {
		return r.fail(err)
	}
	return exitOK
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func priorityText(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

func attemptText(j job) string {
	if j.MaxAttempts == 0 {
		return strconv.Itoa(j.Attempt)
	}
	return fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts)
}
