package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

const breakersUsage = `Usage: ferry breakers <command> [flags]

Commands:
  list          list your circuit breakers (GET /v1/breakers)
  reset TYPE    close the breaker of a job type now (POST /v1/breakers/{type}/reset)

Flags: --url, --key and --json as for ferry jobs. See docs/flow-control.md.
`

// Breakers runs `ferry breakers <args...>` and returns the exit code (as Jobs).
func Breakers(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	if env == nil {
		env = func(string) string { return "" }
	}
	r := &runner{ctx: ctx, env: env, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		args = []string{"list"}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "list", "ls":
		return r.listBreakers(rest)
	case "reset":
		return r.resetBreaker(rest)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, breakersUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "ferry breakers: unknown command %q\n\n%s", cmd, breakersUsage)
		return exitUsage
	}
}

// breakersFlagSet is newFlagSet for `ferry breakers <name>`.
func (r *runner) breakersFlagSet(name, synopsis string) (*flag.FlagSet, *common) {
	fs, c := r.newFlagSet(name, synopsis, "")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ferry breakers %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs, c
}

func (r *runner) listBreakers(args []string) int {
	fs, c := r.breakersFlagSet("list", "[flags]")
	if code, ok := parseNoArgs(fs, args); !ok {
		return code
	}
	cl, rec, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	breakers, err := cl.Breakers(r.ctx)
	if err != nil {
		return r.fail(err)
	}
	if c.json {
		return r.writeRaw(rec.body())
	}
	tw := tabwriter.NewWriter(r.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSTATE\tFAILURES\tWAITING\tOPEN UNTIL")
	for _, b := range breakers {
		until := "-"
		if b.OpenUntil != nil {
			until = b.OpenUntil.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", b.Type, b.State, b.Failures, b.Waiting, until)
	}
	if err := tw.Flush(); err != nil {
		return r.fail(err)
	}
	return exitOK
}

func (r *runner) resetBreaker(args []string) int {
	fs, c := r.breakersFlagSet("reset", "TYPE [flags]")
	pos, code, ok := parse(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return usageError(fs, "want exactly one job type")
	}
	cl, rec, err := r.connect(c)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	previous, err := cl.ResetBreaker(r.ctx, pos[0])
	if err != nil {
		return r.fail(err)
	}
	if c.json {
		return r.writeRaw(rec.body())
	}
	fmt.Fprintf(r.stdout, "breaker %s closed (was %s)\n", pos[0], previous)
	return exitOK
}
