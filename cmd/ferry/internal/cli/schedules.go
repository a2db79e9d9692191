package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
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

// scheduleAction is a command taking one schedule ID: run calls the API
// for id and prints the answer.
type scheduleAction struct {
	doc string
	run func(r *runner, c *common, cl *client.Client, rec *rawRecorder, id string) int
}

var scheduleActions = map[string]scheduleAction{
	"get":     {"Shows a schedule.", showSchedule((*client.Client).GetSchedule)},
	"delete":  {"Deletes a schedule; the jobs it created are not touched.", deleteSchedule},
	"pause":   {"Pauses a schedule: fire times that pass while paused are not caught up.", showSchedule((*client.Client).PauseSchedule)},
	"resume":  {"Resumes a schedule from its next fire time after now.", showSchedule((*client.Client).ResumeSchedule)},
	"trigger": {"Submits the schedule's job now and shows the job.", triggerSchedule},
}

// showSchedule runs a call answering a schedule and prints the schedule.
func showSchedule(call func(*client.Client, context.Context, string) (*client.Schedule, error)) func(*runner, *common, *client.Client, *rawRecorder, string) int {
	return func(r *runner, c *common, cl *client.Client, rec *rawRecorder, id string) int {
		sc, err := call(cl, r.ctx, id)
		if err != nil {
			return r.fail(err)
		}
		return r.printSchedule(c, sc, rec.body())
	}
}

func deleteSchedule(r *runner, _ *common, cl *client.Client, _ *rawRecorder, id string) int {
	if err := cl.DeleteSchedule(r.ctx, id); err != nil {
		return r.fail(err)
	}
	fmt.Fprintf(r.stdout, "deleted %s\n", id)
	return exitOK
}

func triggerSchedule(r *runner, c *common, cl *client.Client, rec *rawRecorder, id string) int {
	j, err := cl.TriggerSchedule(r.ctx, id)
	if err != nil {
		return r.fail(err)
	}
	return r.printJob(c, j, false, rec.body())
}

// oneSchedule runs a command on one schedule ID.
func (r *runner) oneSchedule(name string, a scheduleAction, args []string) int {
	fs, c := r.newFlagSet(name, "ID [flags]", a.doc)
	pos, code, ok := parse(fs, args)
	switch {
	case !ok:
		return code
	case len(pos) != 1 || strings.TrimSpace(pos[0]) == "":
		return usageError(fs, "expected one schedule ID")
	}
	cl, rec, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	return a.run(r, c, cl, rec, pos[0])
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

// request builds the request from the flags set on fs.
func (f *scheduleFlags) request(fs *flag.FlagSet) (client.ScheduleRequest, error) {
	var req client.ScheduleRequest
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "name":
			req.Name = &f.name
		case "cron":
			req.Cron = &f.cron
		case "timezone":
			req.TimeZone = &f.timezone
		case "overlap":
			req.Overlap = &f.overlap
		case "catchup":
			req.Catchup = &f.catchup
		case "catchup-limit":
			req.CatchupLimit = &f.catchupLimit
		case "paused":
			req.Paused = &f.paused
		}
	})
	job, err := f.template()
	req.Job = job
	return req, err
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
	id := ""
	if cmd == "update" {
		if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
			return usageError(fs, "expected one schedule ID")
		}
		id, pos = pos[0], nil
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q", pos[0])
	}
	req, err := f.request(fs)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	cl, rec, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	var sc *client.Schedule
	if id == "" {
		sc, err = cl.CreateSchedule(r.ctx, req)
	} else {
		sc, err = cl.UpdateSchedule(r.ctx, id, req)
	}
	if err != nil {
		return r.fail(err)
	}
	return r.printSchedule(c, sc, rec.body())
}

// printSchedule prints a schedule: the raw answer with --json, else a
// short block.
func (r *runner) printSchedule(c *common, s *client.Schedule, raw []byte) int {
	if c.json {
		return r.writeRaw(raw)
	}
	next := make([]string, 0, len(s.NextFireTimes))
	for i := range s.NextFireTimes {
		next = append(next, timeText(&s.NextFireTimes[i]))
	}
	lastFire := ""
	if s.LastFireAt != nil {
		lastFire = timeText(s.LastFireAt)
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
	line("next fires", dash(strings.Join(next, ", ")))
	line("last fire", dash(strings.TrimSpace(lastFire+" "+s.LastJobID)))
	if s.LastError != "" {
		line("last error", s.LastError)
	}
	line("fired", fmt.Sprintf("%d (skipped %d)", s.Fired, s.Skipped))
	_ = tw.Flush()
	return exitOK
}

func (r *runner) listSchedules(args []string) int {
	fs, c := r.newFlagSet("list", "[flags]", "Lists schedules, oldest first.")
	var opts client.PageOptions
	fs.IntVar(&opts.Limit, "limit", 50, "schedules per page (1-500)")
	fs.StringVar(&opts.Cursor, "cursor", "", "next_cursor of the previous page")
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	cl, rec, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	page, err := cl.ListSchedules(r.ctx, opts)
	if err != nil {
		return r.fail(err)
	}
	if c.json {
		return r.writeRaw(rec.body())
	}
	return r.printScheduleList(page)
}

func (r *runner) printScheduleList(page *client.SchedulePage) int {
	tw := tabwriter.NewWriter(r.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCRON\tTIMEZONE\tPAUSED\tNEXT FIRE")
	for _, s := range page.Schedules {
		next := "-"
		if len(s.NextFireTimes) > 0 {
			next = timeText(&s.NextFireTimes[0])
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\n", s.ID, s.Name, s.Cron, s.TimeZone, s.Paused, next)
	}
	_ = tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(r.stdout, "more: --cursor %s\n", page.NextCursor)
	}
	return exitOK
}
