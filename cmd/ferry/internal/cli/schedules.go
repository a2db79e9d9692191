package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ferryhq/ferry/client"
)

const schedulesUsage = `Usage: ferry schedules <command> [flags]

Commands:
  list     list schedules (GET /v1/schedules)
  get      show a schedule (GET /v1/schedules/{id})
  create   create a schedule (POST /v1/schedules)
  update   change a schedule's fields (PATCH /v1/schedules/{id})
  delete   delete a schedule (DELETE /v1/schedules/{id})
  pause    stop a schedule's fires (POST /v1/schedules/{id}/pause)
  resume   fire again from the next fire time (POST /v1/schedules/{id}/resume)
  trigger  submit the schedule's job now (POST /v1/schedules/{id}/trigger)

Common flags: --url, --key, --json (as for 'ferry jobs'). See docs/schedules.md.
Run 'ferry schedules <command> -h' for a command's flags.
`

// Schedules runs `ferry schedules <args...>` and returns the exit code: 0 on
// success, 1 on an API or network failure, 2 on a usage error.
func Schedules(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	if env == nil {
		env = func(string) string { return "" }
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, schedulesUsage)
		return exitUsage
	}
	r := &runner{group: "schedules", ctx: ctx, env: env, stdout: stdout, stderr: stderr}
	cmd, rest := args[0], args[1:]
	if one, ok := scheduleActions[cmd]; ok {
		return r.oneSchedule(cmd, one, rest)
	}
	switch cmd {
	case "list", "ls":
		return r.listSchedules(rest)
	case "create":
		return r.writeSchedule("create", rest)
	case "update":
		return r.writeSchedule("update", rest)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, schedulesUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "ferry schedules: unknown command %q\n\n%s", cmd, schedulesUsage)
	return exitUsage
}

// scheduleAction is a command taking one schedule ID.
type scheduleAction struct {
	method, suffix, doc string
}

var scheduleActions = map[string]scheduleAction{
	"get":     {http.MethodGet, "", "Shows a schedule."},
	"delete":  {http.MethodDelete, "", "Deletes a schedule; the jobs it created are not touched."},
	"pause":   {http.MethodPost, "/pause", "Pauses a schedule: fire times that pass while paused are not caught up."},
	"resume":  {http.MethodPost, "/resume", "Resumes a schedule from its next fire time after now."},
	"trigger": {http.MethodPost, "/trigger", "Submits the schedule's job now and shows the job."},
}

// oneSchedule runs a command on one schedule ID.
func (r *runner) oneSchedule(name string, a scheduleAction, args []string) int {
	fs, c := r.newFlagSet(name, "ID [flags]", a.doc)
	id, cl, code, ok := r.idAndClient(fs, c, args)
	if !ok {
		return code
	}
	raw, err := cl.Raw(r.ctx, a.method, "/v1/schedules/"+url.PathEscape(id)+a.suffix, nil, nil)
	switch {
	case err != nil:
		return r.fail(err)
	case name == "trigger":
		var j client.Job
		if err := json.Unmarshal(raw, &j); err != nil {
			return r.fail(fmt.Errorf("decoding the triggered job: %w", err))
		}
		return r.printJob(c, &j, false, raw)
	case name == "delete":
		fmt.Fprintf(r.stdout, "deleted %s\n", id)
		return exitOK
	}
	return r.printSchedule(c, raw)
}

// idAndClient parses a command's single ID argument and its client.
func (r *runner) idAndClient(fs *flag.FlagSet, c *common, args []string) (string, *client.Client, int, bool) {
	pos, code, ok := parse(fs, args)
	switch {
	case !ok:
		return "", nil, code, false
	case len(pos) != 1 || strings.TrimSpace(pos[0]) == "":
		return "", nil, usageError(fs, "expected one schedule ID"), false
	}
	cl, _, err := r.connect(c)
	if err != nil {
		return "", nil, usageError(fs, "%v", err), false
	}
	return pos[0], cl, 0, true
}

// scheduleFlags are the fields of create and update; only flags given on
// the command line are sent.
type scheduleFlags struct {
	name, cron, timezone, overlap, catchup, job, typ, payload, queue string
	catchupLimit                                                     int
	paused                                                           bool
}

func (f *scheduleFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "name", "", "schedule name, unique in the tenant")
	fs.StringVar(&f.cron, "cron", "", `cron expression: 5 fields, 6 with seconds, "@daily", "@every 30s"`)
	fs.StringVar(&f.timezone, "timezone", "", "IANA time zone (default UTC)")
	fs.StringVar(&f.overlap, "overlap", "", "allow, skip or queue_one (default allow)")
	fs.StringVar(&f.catchup, "catchup", "", "skip, one or all (default one)")
	fs.IntVar(&f.catchupLimit, "catchup-limit", 0, "most missed fire times catch-up all fires (default 10)")
	fs.BoolVar(&f.paused, "paused", false, "create or set the schedule paused (update: --paused=false resumes)")
	fs.StringVar(&f.job, "job", "", `the whole job template as JSON, e.g. '{"type":"noop"}'`)
	fs.StringVar(&f.typ, "type", "", "job type (instead of --job)")
	fs.StringVar(&f.payload, "payload", "", "job payload as JSON (with --type)")
	fs.StringVar(&f.queue, "queue", "", "job queue (with --type)")
}

// body builds the request from the flags set on fs.
func (f *scheduleFlags) body(fs *flag.FlagSet) (map[string]any, error) {
	body := map[string]any{}
	var err error
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "name", "cron", "timezone", "overlap", "catchup":
			body[fl.Name] = fl.Value.String()
		case "catchup-limit":
			body["catchup_limit"] = f.catchupLimit
		case "paused":
			body["paused"] = f.paused
		}
	})
	job, err := f.template()
	if job != nil {
		body["job"] = job
	}
	return body, err
}

// template is the job template of --job, or of --type, --payload, --queue.
func (f *scheduleFlags) template() (json.RawMessage, error) {
	if f.job != "" {
		if f.typ != "" || f.payload != "" || f.queue != "" {
			return nil, fmt.Errorf("give --job or --type/--payload/--queue, not both")
		}
		if !json.Valid([]byte(f.job)) {
			return nil, fmt.Errorf("--job is not JSON")
		}
		return json.RawMessage(f.job), nil
	}
	if f.typ == "" {
		if f.payload != "" || f.queue != "" {
			return nil, fmt.Errorf("--payload and --queue need --type")
		}
		return nil, nil
	}
	job := map[string]any{"type": f.typ}
	if f.payload != "" {
		if !json.Valid([]byte(f.payload)) {
			return nil, fmt.Errorf("--payload is not JSON")
		}
		job["payload"] = json.RawMessage(f.payload)
	}
	if f.queue != "" {
		job["queue"] = f.queue
	}
	return json.Marshal(job)
}

// writeSchedule runs create (POST) or update ID (PATCH).
func (r *runner) writeSchedule(cmd string, args []string) int {
	synopsis, doc := "--name NAME --cron EXPR (--type TYPE | --job JSON) [flags]", "Creates a schedule."
	if cmd == "update" {
		synopsis, doc = "ID [flags]", "Changes the given fields of a schedule."
	}
	fs, c := r.newFlagSet(cmd, synopsis, doc)
	var f scheduleFlags
	f.register(fs)
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	method, path := http.MethodPost, "/v1/schedules"
	if cmd == "update" {
		if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
			return usageError(fs, "expected one schedule ID")
		}
		method, path, pos = http.MethodPatch, path+"/"+url.PathEscape(pos[0]), nil
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q", pos[0])
	}
	body, err := f.body(fs)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	return r.sendSchedule(fs, c, method, path, body)
}

func (r *runner) sendSchedule(fs *flag.FlagSet, c *common, method, path string, body map[string]any) int {
	cl, _, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	raw, err := cl.Raw(r.ctx, method, path, nil, body)
	if err != nil {
		return r.fail(err)
	}
	return r.printSchedule(c, raw)
}

// schedule is the part of the schedule resource the CLI shows.
type schedule struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Cron          string          `json:"cron"`
	TimeZone      string          `json:"timezone"`
	Job           json.RawMessage `json:"job"`
	Overlap       string          `json:"overlap"`
	Catchup       string          `json:"catchup"`
	CatchupLimit  int             `json:"catchup_limit"`
	Paused        bool            `json:"paused"`
	NextFireTimes []string        `json:"next_fire_times"`
	LastFireAt    string          `json:"last_fire_at"`
	LastJobID     string          `json:"last_job_id"`
	LastError     string          `json:"last_error"`
	Fired         int64           `json:"fired"`
	Skipped       int64           `json:"skipped"`
}

func (r *runner) printSchedule(c *common, raw []byte) int {
	if c.json {
		return r.writeRaw(raw)
	}
	var s schedule
	if err := json.Unmarshal(raw, &s); err != nil {
		return r.fail(fmt.Errorf("decoding schedule: %w", err))
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 1, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	line("id", s.ID)
	line("name", s.Name)
	line("cron", s.Cron+" ("+s.TimeZone+")")
	line("job", plain(s.Job))
	line("overlap", s.Overlap)
	line("catchup", s.Catchup+" (limit "+strconv.Itoa(s.CatchupLimit)+")")
	line("paused", strconv.FormatBool(s.Paused))
	line("next fires", dash(strings.Join(s.NextFireTimes, ", ")))
	line("last fire", dash(strings.TrimSpace(s.LastFireAt+" "+s.LastJobID)))
	if s.LastError != "" {
		line("last error", s.LastError)
	}
	line("fired", fmt.Sprintf("%d (skipped %d)", s.Fired, s.Skipped))
	_ = tw.Flush()
	return exitOK
}

func (r *runner) listSchedules(args []string) int {
	fs, c := r.newFlagSet("list", "[flags]", "Lists schedules, oldest first.")
	limit := fs.Int("limit", 50, "schedules per page (1-500)")
	cursor := fs.String("cursor", "", "next_cursor of the previous page")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q", pos[0])
	}
	cl, _, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	q := url.Values{"limit": {strconv.Itoa(*limit)}}
	if *cursor != "" {
		q.Set("cursor", *cursor)
	}
	raw, err := cl.Raw(r.ctx, http.MethodGet, "/v1/schedules", q, nil)
	if err != nil {
		return r.fail(err)
	}
	if c.json {
		return r.writeRaw(raw)
	}
	return r.printScheduleList(raw)
}

func (r *runner) printScheduleList(raw []byte) int {
	var page struct {
		Schedules  []schedule `json:"schedules"`
		NextCursor string     `json:"next_cursor"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return r.fail(fmt.Errorf("decoding schedules: %w", err))
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCRON\tTIMEZONE\tPAUSED\tNEXT FIRE")
	for _, s := range page.Schedules {
		next := "-"
		if len(s.NextFireTimes) > 0 {
			next = s.NextFireTimes[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\n", s.ID, s.Name, s.Cron, s.TimeZone, s.Paused, next)
	}
	_ = tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(r.stdout, "more: --cursor %s\n", page.NextCursor)
	}
	return exitOK
}
