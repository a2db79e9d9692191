// Command ferry is Ferry's command line: `ferry dev` runs the whole stack in
// one process; `ferry jobs …` submits and inspects jobs over the HTTP API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferryhq/ferry/cmd/ferry/internal/cli"
	"github.com/ferryhq/ferry/cmd/ferry/internal/devcmd"
	"github.com/ferryhq/ferry/cmd/ferry/internal/opscmd"
	"github.com/ferryhq/ferry/platform/service"
)

const usage = `Usage: ferry <command> [arguments]

Commands:
  dev     run the whole stack: every service in one process, embedded Kafka, local Postgres and Redis: ferry dev -h
  jobs    submit, get, list and cancel jobs: ferry jobs help
  breakers list or reset the circuit breakers of your job types: ferry breakers help
  migrate apply or list every component's Postgres migrations, grant the runtime role, audit partition upkeep: ferry migrate help
  schedules  create, list, change, pause, resume and trigger cron schedules: ferry schedules help
  doctor  check a deployment's connections, credentials, topics, migrations and clock
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "dev":
		service.TuneGC() // the servers' collector setting (the broker child sets its own)
		if err := devcmd.Run(ctx, args[1:], os.LookupEnv, stdout); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintln(stderr, "ferry dev:", err)
			return 1
		}
		return 0
	case devcmd.KafkaCommand: // hidden: the broker child of `ferry dev`
		// Its collector was ~12 % of its CPU at 1,000 jobs/s at Go's default
		// (docs/performance.md, Round 13).
		service.TuneGC()
		if err := devcmd.RunKafka(ctx, args[1:], stderr); err != nil {
			fmt.Fprintln(stderr, "ferry "+devcmd.KafkaCommand+":", err)
			return 1
		}
		return 0
	case "jobs":
		return cli.Jobs(ctx, args[1:], os.Getenv, stdout, stderr)
	case "breakers":
		return cli.Breakers(ctx, args[1:], os.Getenv, stdout, stderr)
	case "schedules":
		return cli.Schedules(ctx, args[1:], os.Getenv, stdout, stderr)
	case "migrate":
		return opscmd.Migrate(ctx, args[1:], os.LookupEnv, stdout, stderr)
	case "doctor":
		return opscmd.Doctor(ctx, args[1:], os.LookupEnv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "ferry: unknown command %q\n\n%s", args[0], usage)
	return 2
}
