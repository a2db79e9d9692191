package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferryhq/ferry/client"
	"github.com/ferryhq/ferry/platform/jobs"
)

const submitDoc = `Submits a job. With --wait, polls the job until it is succeeded, dead or
cancelled, prints it, and exits 0 only if it succeeded.`

// submitFlags are the flags of `ferry jobs submit`.
type submitFlags struct {
	req            client.JobRequest
	payload        string
	priority       int
	maxAttempts    int
	delay, timeout durationString
	runAt, notAft  timeString
	tags           stringList
	concurrency    client.Concurrency
	unique         client.Unique
	uniqueTTL      durationString
	wait           bool
	waitInterval   time.Duration
}

func (r *runner) submit(args []string) int {
	fs, c := r.newFlagSet("submit", "--type TYPE [flags]", submitDoc)
	var f submitFlags
	f.register(fs)
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	if msg := f.request(fs); msg != "" {
		return usageError(fs, "%s", msg)
	}
	cl, rec, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	res, err := cl.Submit(r.ctx, f.req)
	if err != nil {
		return r.fail(err)
	}
	if !f.wait {
		return r.printJob(c, &res.Job, res.Deduplicated, rec.body())
	}
	return r.waitFor(c, cl, rec, res.Job, f.waitInterval)
}

func (f *submitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.req.Type, "type", "", "handler name (required)")
	fs.StringVar(&f.payload, "payload", "", "JSON payload, or @FILE to read it from a file")
	fs.StringVar(&f.req.Queue, "queue", "", "queue (server default: default)")
	fs.IntVar(&f.priority, "priority", jobs.DefaultPriority, fmt.Sprintf("priority, %d most urgent … %d least", jobs.MinPriority, jobs.MaxPriority))
	fs.Var(&f.delay, "delay", "run after this duration (e.g. 30s)")
	fs.Var(&f.runAt, "run-at", "run at this RFC 3339 time")
	fs.IntVar(&f.maxAttempts, "max-attempts", jobs.DefaultMaxAttempts, "attempts before dead-lettering")
	fs.Var(&f.timeout, "timeout", "per-attempt timeout (e.g. 2m)")
	fs.Var(&f.notAft, "not-after", "RFC 3339 deadline; past it the job is dead-lettered as expired")
	fs.Var(&f.tags, "tag", "tag (repeatable)")
	fs.StringVar(&f.req.Pool, "pool", "", "worker pool: short or long")
	fs.StringVar(&f.req.IdempotencyKey, "idempotency-key", "", "Idempotency-Key header (default: a random key, so retries never make a second job)")
	fs.StringVar(&f.concurrency.Key, "concurrency-key", "", "concurrency key: at most --concurrency-limit jobs with it run at once")
	fs.IntVar(&f.concurrency.Limit, "concurrency-limit", 0, "limit of --concurrency-key (server default: 1)")
	fs.StringVar(&f.unique.Key, "unique-key", "", "unique key: while a job with it is in the --unique-while state, submitting again answers that job")
	fs.StringVar(&f.unique.While, "unique-while", "", "queued, active or until_done (server default: until_done)")
	fs.Var(&f.uniqueTTL, "unique-ttl", "longest the unique key holds (e.g. 1h; server default: 24h)")
	fs.BoolVar(&f.wait, "wait", false, "wait until the job is succeeded, dead or cancelled")
	fs.DurationVar(&f.waitInterval, "wait-interval", 500*time.Millisecond, "poll interval of --wait")
}

// request completes f.req from the parsed flags; it returns what is wrong
// with them, or "".
func (f *submitFlags) request(fs *flag.FlagSet) string {
	req := &f.req
	if strings.TrimSpace(req.Type) == "" {
		return "--type is required"
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["priority"] && !jobs.ValidPriority(f.priority):
		return fmt.Sprintf("--priority must be between %d and %d", jobs.MinPriority, jobs.MaxPriority)
	case set["max-attempts"] && !jobs.ValidMaxAttempts(f.maxAttempts):
		return fmt.Sprintf("--max-attempts must be between 1 and %d", jobs.MaxMaxAttempts)
	case set["delay"] && set["run-at"]:
		return "--delay and --run-at are mutually exclusive"
	case req.Pool != "" && req.Pool != "short" && req.Pool != "long":
		return "--pool must be short or long"
	case f.waitInterval <= 0:
		return "--wait-interval must be positive"
	case f.concurrency.Key == "" && f.concurrency.Limit != 0:
		return "--concurrency-limit needs --concurrency-key"
	case f.unique.Key == "" && (f.unique.While != "" || f.uniqueTTL != ""):
		return "--unique-while and --unique-ttl need --unique-key"
	}
	if f.unique.Key != "" {
		f.unique.TTL = f.uniqueTTL.value()
		req.Unique = &f.unique
	}
	if f.concurrency.Key != "" {
		req.Concurrency = &f.concurrency
	}
	if set["priority"] {
		req.Priority = &f.priority
	}
	if set["max-attempts"] {
		req.MaxAttempts = f.maxAttempts
	}
	if set["payload"] {
		raw, msg := payloadOf(f.payload)
		if msg != "" {
			return msg
		}
		req.Payload = raw
	}
	req.Delay, req.Timeout = f.delay.value(), f.timeout.value()
	req.RunAt, req.NotAfter = f.runAt.value(), f.notAft.value()
	req.Tags = f.tags
	return ""
}

// payloadOf reads --payload: JSON, or @FILE.
func payloadOf(payload string) (json.RawMessage, string) {
	raw := []byte(payload)
	if name, ok := strings.CutPrefix(payload, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Sprintf("--payload: %v", err)
		}
		raw = b
	}
	raw = bytes.TrimSpace(raw)
	if !json.Valid(raw) {
		return nil, "--payload is not valid JSON"
	}
	return raw, ""
}

// waitFor polls the submitted job every interval until it is terminal,
// prints it, and exits 0 only if it succeeded.
func (r *runner) waitFor(c *common, cl *client.Client, rec *rawRecorder, j client.Job, interval time.Duration) int {
	if j.ID == "" {
		return r.fail(fmt.Errorf("submit answer has no job id"))
	}
	if !c.json {
		fmt.Fprintf(r.stderr, "submitted %s (%s), waiting…\n", j.ID, j.Status)
	}
	done := &j
	if !j.Status.Terminal() {
		var err error
		// Polling only: --wait-interval is the pace, as it always was.
		if done, err = cl.Wait(r.ctx, j.ID, &client.WaitOptions{PollInterval: interval, NoStream: true}); err != nil {
			return r.fail(fmt.Errorf("waiting for job %s: %w", j.ID, err))
		}
	}
	if code := r.printJob(c, done, false, rec.body()); code != exitOK {
		return code
	}
	if done.Status != client.StatusSucceeded {
		return exitError
	}
	return exitOK
}

func (r *runner) get(args []string) int {
	fs, c := r.newFlagSet("get", "ID [flags]", "Shows a job.")
	return r.oneJob(fs, c, args, func(cl *client.Client, id string) (*client.Job, error) {
		return cl.Get(r.ctx, id)
	})
}

func (r *runner) cancel(args []string) int {
	fs, c := r.newFlagSet("cancel", "ID [flags]", "Cancels a job and shows it.")
	return r.oneJob(fs, c, args, func(cl *client.Client, id string) (*client.Job, error) {
		return cl.Cancel(r.ctx, id)
	})
}

// oneJob runs a command taking one job ID and printing the job call returns.
func (r *runner) oneJob(fs *flag.FlagSet, c *common, args []string, call func(*client.Client, string) (*client.Job, error)) int {
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
	cl, rec, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	j, err := call(cl, pos[0])
	if err != nil {
		return r.fail(err)
	}
	return r.printJob(c, j, false, rec.body())
}

// rawJobList is the answer of GET /v1/jobs with each job as the API sent it.
type rawJobList struct {
	Jobs       []json.RawMessage `json:"jobs"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

const listDoc = `Lists jobs, newest first as the server orders them. With --all, follows
next_cursor until the last page (--limit is then the page size).`

func (r *runner) list(args []string) int {
	fs, c := r.newFlagSet("list", "[flags]", listDoc)
	var (
		opts   client.ListOptions
		status string
		tags   stringList
		all    bool
	)
	fs.StringVar(&status, "status", "", "only jobs in this status (queued, scheduled, running, succeeded, dead, cancelled)")
	fs.StringVar(&opts.Type, "type", "", "only jobs of this type")
	fs.StringVar(&opts.Queue, "queue", "", "only jobs in this queue")
	fs.Var(&tags, "tag", "only jobs with this tag (repeatable)")
	fs.IntVar(&opts.Limit, "limit", 0, "page size (server default when 0)")
	fs.StringVar(&opts.Cursor, "cursor", "", "continue from this next_cursor")
	fs.BoolVar(&all, "all", false, "follow next_cursor and list every page")
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	if opts.Limit < 0 {
		return usageError(fs, "--limit must not be negative")
	}
	opts.Status, opts.Tags = client.Status(status), tags
	cl, rec, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	if c.json && !all {
		if _, err := cl.List(r.ctx, opts); err != nil {
			return r.fail(err)
		}
		return r.writeRaw(rec.body())
	}
	jobs, raws, next, err := r.pages(cl, rec, opts, all)
	if err != nil {
		return r.fail(err)
	}
	if c.json { // --all: one document with every page's jobs
		b, err := json.Marshal(rawJobList{Jobs: raws})
		if err != nil {
			return r.fail(err)
		}
		return r.writeRaw(b)
	}
	return r.printList(jobs, next, all)
}

// pages lists one page, or with all every page, following next_cursor. It
// returns the jobs decoded and as sent, and the cursor of the next page.
func (r *runner) pages(cl *client.Client, rec *rawRecorder, opts client.ListOptions, all bool) ([]client.Job, []json.RawMessage, string, error) {
	jobs, raws := []client.Job{}, []json.RawMessage{}
	seen := map[string]bool{}
	for {
		page, err := cl.List(r.ctx, opts)
		if err != nil {
			return nil, nil, "", err
		}
		var raw rawJobList
		if err := json.Unmarshal(rec.body(), &raw); err != nil {
			return nil, nil, "", fmt.Errorf("decoding job list: %w", err)
		}
		jobs, raws = append(jobs, page.Jobs...), append(raws, raw.Jobs...)
		next := page.NextCursor
		if !all || next == "" {
			return jobs, raws, next, nil
		}
		if seen[next] {
			return nil, nil, "", fmt.Errorf("server repeated cursor %q", next)
		}
		seen[next] = true
		opts.Cursor = next
	}
}

// printList prints jobs as a table, and the cursor of the next page.
func (r *runner) printList(jobs []client.Job, next string, all bool) int {
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tTYPE\tQUEUE\tPRI\tATTEMPT\tCREATED")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n",
			dash(j.ID), dash(string(j.Status)), dash(j.Type), dash(j.Queue), j.Priority,
			attemptText(j), timeText(&j.CreatedAt))
	}
	if err := tw.Flush(); err != nil {
		return r.fail(err)
	}
	if next != "" && !all {
		fmt.Fprintf(r.stderr, "more: --cursor %s (or --all)\n", next)
	}
	return exitOK
}

// printJob prints a job: the raw answer with --json, else a short block.
func (r *runner) printJob(c *common, j *client.Job, deduplicated bool, raw []byte) int {
	if c.json {
		return r.writeRaw(raw)
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 1, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	line("id", dash(j.ID))
	line("status", dash(string(j.Status)))
	if deduplicated || j.Deduplicated {
		line("deduplicated", "true")
	}
	line("type", dash(j.Type))
	line("queue", dash(j.Queue))
	line("priority", strconv.Itoa(j.Priority))
	line("attempt", attemptText(*j))
	if len(j.Tags) > 0 {
		line("tags", strings.Join(j.Tags, ", "))
	}
	line("created", timeText(&j.CreatedAt))
	if j.ScheduledFor != nil {
		line("scheduled", timeText(j.ScheduledFor))
	}
	line("started", timeText(j.StartedAt))
	line("finished", timeText(j.FinishedAt))
	for _, l := range detailLines(j) {
		line(l[0], l[1])
	}
	if err := tw.Flush(); err != nil {
		return r.fail(err)
	}
	return exitOK
}

// detailLines are the lines of printJob shown only when the job has them:
// progress, last error, result, re-drive origin.
func detailLines(j *client.Job) [][2]string {
	var out [][2]string
	if p := j.Progress; p != nil {
		s := []string{strconv.FormatFloat(p.Percent, 'f', -1, 64) + "%"}
		if p.Message != "" {
			s = append(s, p.Message)
		}
		out = append(out, [2]string{"progress", strings.Join(s, " ")})
	}
	if e := j.LastError; e != nil && (e.Class != "" || e.Message != "") {
		msg := e.Class + ": " + e.Message
		if e.Class == "" || e.Message == "" {
			msg = e.Class + e.Message
		}
		out = append(out, [2]string{"last_error", msg})
	}
	if len(j.Result) > 0 && string(j.Result) != "null" {
		out = append(out, [2]string{"result", plain(j.Result)})
	}
	if j.RedrivenFrom != "" {
		out = append(out, [2]string{"redriven_from", j.RedrivenFrom})
	}
	return out
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

// timeText renders a time as the API sends it (RFC 3339, UTC), "-" if none.
func timeText(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
}

func attemptText(j client.Job) string {
	if j.MaxAttempts == 0 {
		return strconv.Itoa(j.Attempt)
	}
	return fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts)
}
