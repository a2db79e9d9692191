// Command testinfra runs the throw-away PostgreSQL and Redis servers that
// `make test` (scripts/test.sh) points the test suites at.
//
// It starts both servers with their data below -dir, writes shell exports of
// FERRY_TEST_POSTGRES_URL and FERRY_TEST_REDIS_URL to -env-file once both are
// ready, and keeps them running until it receives SIGTERM or SIGINT, then
// stops them. It gets SIGTERM itself when its parent dies, and if testinfra
// is killed, the servers receive their parent-death signal and stop too.
//
// The PostgreSQL server runs with fsync off: its data is deleted after the
// run, and durability is not what the test suites measure.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ferryhq/ferry/platform/devstack"
)

func main() {
	dir := flag.String("dir", "", "directory for the servers' data (required)")
	envFile := flag.String("env-file", "", "file to write the shell exports to once ready (required)")
	flag.Parse()
	if *dir == "" || *envFile == "" {
		flag.Usage()
		os.Exit(2)
	}
	log.SetFlags(0)
	log.SetPrefix("testinfra: ")
	if err := run(*dir, *envFile); err != nil {
		log.Fatal(err)
	}
}

func run(dir, envFile string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Stop with whoever started us, even if it is killed without a chance
	// to stop us (scripts/test.sh runs us in a session of our own, out of
	// reach of signals sent to its process group).
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %w", errno)
	}
	if os.Getppid() == 1 {
		return fmt.Errorf("parent exited before start")
	}

	startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	pg, pgURL, err := devstack.StartPostgres(startCtx, devstack.PostgresConfig{
		DataDir: filepath.Join(dir, "postgres"),
		Settings: map[string]string{
			"fsync":              "off",
			"synchronous_commit": "off",
			"full_page_writes":   "off",
			"max_connections":    "500",
		},
	})
	if err != nil {
		return err
	}
	defer stopProcess(pg)
	rd, rdURL, err := devstack.StartRedis(startCtx, devstack.RedisConfig{
		DataDir:   filepath.Join(dir, "redis"),
		Databases: 4096,
	})
	if err != nil {
		return err
	}
	defer stopProcess(rd)

	env := fmt.Sprintf("export FERRY_TEST_POSTGRES_URL=%s\nexport FERRY_TEST_REDIS_URL=%s\n", shellQuote(pgURL), shellQuote(rdURL))
	tmp := envFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(env), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, envFile); err != nil {
		return err
	}
	log.Printf("postgres pid %d at %s; redis pid %d at %s", pg.PID(), pgURL, rd.PID(), rdURL)

	select {
	case <-ctx.Done():
		return nil
	case <-pg.Done():
		return fmt.Errorf("postgres exited unexpectedly; see %s", pg.LogPath())
	case <-rd.Done():
		return fmt.Errorf("redis exited unexpectedly; see %s", rd.LogPath())
	}
}

func stopProcess(p *devstack.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		log.Print(err)
	}
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
