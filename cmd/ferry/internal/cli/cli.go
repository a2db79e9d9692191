// Package cli implements the `ferry jobs` command family: submit, get, list
// and cancel jobs through Ferry's HTTP API.
//
// It talks to the API only over HTTP, through the Go client package
// (github.com/ferryhq/ferry/client), so it works the same against `ferry
// dev` and a deployed Ferry, and gets the client's retries: every
// submission carries an Idempotency-Key (--idempotency-key, else a random
// one), so a retry after a lost answer never makes a second job.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferryhq/ferry/client"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // API, network or job failure
	exitUsage = 2 // bad command line
)

const defaultURL = "http://127.0.0.1:8080"

const jobsUsage = `Usage: ferry jobs <command> [flags]

Commands:
  submit   submit a job (POST /v1/jobs)
  get      show a job (GET /v1/jobs/{id})
  list     list jobs (GET /v1/jobs)
  cancel   cancel a job (POST /v1/jobs/{id}/cancel)

Common flags:
  --url URL    API base URL (default $FERRY_URL, else http://127.0.0.1:8080)
  --key KEY    API key (default $FERRY_API_KEY, else the file
               $FERRY_DATA_DIR/dev-api-key; FERRY_DATA_DIR defaults to .ferry)
  --json       print the raw JSON response instead of human output

Run 'ferry jobs <command> -h' for a command's flags.
`

// Jobs runs `ferry jobs <args...>` and returns the process exit code: 0 on
// success, 1 on an API, network or job failure, 2 on a usage error.
func Jobs(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	if env == nil {
		env = func(string) string { return "" }
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, jobsUsage)
		return exitUsage
	}
	r := &runner{ctx: ctx, env: env, stdout: stdout, stderr: stderr}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "submit":
		return r.submit(rest)
	case "get":
		return r.get(rest)
	case "list", "ls":
		return r.list(rest)
	case "cancel":
		return r.cancel(rest)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, jobsUsage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "ferry jobs: unknown command %q\n\n%s", cmd, jobsUsage)
		return exitUsage
	}
}

type runner struct {
	// group is the command family ("jobs" when empty), for usage lines.
	group  string
	ctx    context.Context
	env    func(string) string
	stdout io.Writer
	stderr io.Writer
}

// common holds the flags every subcommand takes.
type common struct {
	url  string
	key  string
	json bool
}

// newFlagSet returns a flag set for `ferry jobs <name>` with the common flags
// registered on it.
func (r *runner) newFlagSet(name, synopsis, doc string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet("ferry "+r.groupName()+" "+name, flag.ContinueOnError)
	fs.SetOutput(r.stderr)
	c := &common{}
	def := r.env("FERRY_URL")
	if def == "" {
		def = defaultURL
	}
	fs.StringVar(&c.url, "url", def, "API base URL ($FERRY_URL sets the default)")
	fs.StringVar(&c.key, "key", "", "API key (default $FERRY_API_KEY, else $FERRY_DATA_DIR/dev-api-key)")
	fs.BoolVar(&c.json, "json", false, "print the raw JSON response")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ferry %s %s %s\n", r.groupName(), name, synopsis)
		if doc != "" {
			fmt.Fprintf(fs.Output(), "\n%s\n", doc)
		}
		fmt.Fprintf(fs.Output(), "\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, c
}

func (r *runner) groupName() string {
	if r.group == "" {
		return "jobs"
	}
	return r.group
}

// parseNoArgs parses args for a command that takes flags only: a
// positional argument is a usage error. It returns the exit code when the
// command must stop.
func parseNoArgs(fs *flag.FlagSet, args []string) (int, bool) {
	pos, code, ok := parse(fs, args)
	if !ok {
		return code, false
	}
	if len(pos) > 0 {
		return usageError(fs, "unexpected argument %q", pos[0]), false
	}
	return 0, true
}

// parse parses args allowing flags and positional arguments in any order
// (`get ID --json` as well as `get --json ID`); "--" ends flag parsing.
// It returns the positional arguments and, if parsing failed, the exit code.
func parse(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitUsage, false // flag already printed the error and usage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), 0, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError prints msg and the flag set's usage, and returns exitUsage.
func usageError(fs *flag.FlagSet, format string, a ...any) int {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.Usage()
	return exitUsage
}

// connect resolves the base URL and API key of c and returns the Go client
// of the API, with the recorder of its raw answers (for --json).
func (r *runner) connect(c *common) (*client.Client, *rawRecorder, error) {
	base := strings.TrimRight(strings.TrimSpace(c.url), "/")
	if base == "" {
		return nil, nil, errors.New("--url is empty")
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, nil, fmt.Errorf("--url %q: must start with http:// or https://", c.url)
	}
	key, err := r.resolveKey(c.key)
	if err != nil {
		return nil, nil, err
	}
	return newAPIClient(base, key)
}

// resolveKey returns flagKey if set, else $FERRY_API_KEY, else the contents
// of $FERRY_DATA_DIR/dev-api-key if that file exists, else "".
func (r *runner) resolveKey(flagKey string) (string, error) {
	if flagKey != "" {
		return flagKey, nil
	}
	if k := r.env("FERRY_API_KEY"); k != "" {
		return k, nil
	}
	dir := r.env("FERRY_DATA_DIR")
	if dir == "" {
		dir = ".ferry"
	}
	b, err := os.ReadFile(filepath.Join(dir, "dev-api-key"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading API key: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	if v == "" {
		return errors.New("empty value")
	}
	*s = append(*s, v)
	return nil
}

// durationString is a flag holding a Go duration (e.g. 1h30m), checked
// when it is set.
type durationString string

func (d *durationString) String() string { return string(*d) }

func (d *durationString) Set(v string) error {
	dur, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("not a duration (e.g. 500ms, 2s, 1h30m): %q", v)
	}
	if dur < 0 {
		return fmt.Errorf("negative duration %q", v)
	}
	*d = durationString(v)
	return nil
}

// value is the duration, zero when the flag was not given.
func (d durationString) value() time.Duration {
	v, _ := time.ParseDuration(string(d)) // Set checked it
	return v
}

// timeString is a flag holding an RFC 3339 time.
type timeString string

func (t *timeString) String() string { return string(*t) }

func (t *timeString) Set(v string) error {
	if _, err := time.Parse(time.RFC3339, v); err != nil {
		return fmt.Errorf("not an RFC 3339 time (e.g. 2025-01-02T15:04:05Z): %q", v)
	}
	*t = timeString(v)
	return nil
}

// value is the time, zero when the flag was not given.
func (t timeString) value() time.Time {
	v, _ := time.Parse(time.RFC3339, string(t)) // Set checked it
	return v
}
