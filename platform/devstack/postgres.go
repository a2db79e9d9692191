package devstack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PostgresConfig configures [StartPostgres].
type PostgresConfig struct {
	// DataDir is the cluster's data directory (PGDATA). It is created and
	// initialised with initdb when it holds no cluster yet, and re-used
	// otherwise. Required.
	DataDir string

	// Port is the TCP port to listen on, on 127.0.0.1. Defaults to a free
	// port (0).
	Port int

	// Database is created if missing once the server is up, and is the
	// database of the returned URL. Defaults to "ferry".
	Database string

	// BinDir holds initdb and postgres. Defaults to `pg_config --bindir`,
	// else the newest /usr/lib/postgresql/*/bin, else PATH.
	BinDir string

	// Settings are extra server settings passed as `-c name=value`, such as
	// "max_connections": "300". They override the defaults, which include
	// fsync=on.
	Settings map[string]string

	// LogFile receives the output of initdb and the server. Defaults to
	// postgres.log inside DataDir.
	LogFile string

	// StartTimeout bounds startup when ctx has no deadline. Defaults to 60s.
	StartTimeout time.Duration
}

// WithDefaults returns a copy of c with its zero fields set to their defaults.
func (c PostgresConfig) WithDefaults() PostgresConfig {
	if c.Database == "" {
		c.Database = "ferry"
	}
	if c.LogFile == "" && c.DataDir != "" {
		c.LogFile = filepath.Join(c.DataDir, "postgres.log")
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	return c
}

// Validate reports a configuration StartPostgres cannot run.
func (c PostgresConfig) Validate() error {
	if c.DataDir == "" {
		return errors.New("devstack: PostgresConfig.DataDir is required")
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("devstack: PostgresConfig.Port %d out of range", c.Port)
	}
	return nil
}

// superuser is the role initdb creates and the returned URLs use.
const superuser = "postgres"

// StartPostgres starts a PostgreSQL server on 127.0.0.1 with its data in
// cfg.DataDir, running initdb first when the directory holds no cluster yet
// (trust authentication, which is safe because it only listens on loopback
// and on a unix socket inside DataDir). It returns once the server accepts
// connections and cfg.Database exists, with the URL of that database:
// postgres://postgres@127.0.0.1:PORT/ferry?sslmode=disable.
//
// When the caller is root, initdb and the server run as the `postgres` OS
// user, which then owns DataDir.
func StartPostgres(ctx context.Context, cfg PostgresConfig) (*Process, string, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	ctx, cancel := withStartTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, "", fmt.Errorf("devstack: postgres data dir: %w", err)
	}
	bin, err := postgresBinDir(cfg.BinDir)
	if err != nil {
		return nil, "", err
	}
	runAs, err := postgresRunAs()
	if err != nil {
		return nil, "", err
	}
	if err := preparePostgresDataDir(dataDir, runAs); err != nil {
		return nil, "", err
	}
	if err := initdbIfNeeded(ctx, bin, dataDir, cfg.LogFile, runAs); err != nil {
		return nil, "", err
	}

	for attempt := 1; ; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, "", err
			}
		}
		p, url, err := runPostgres(ctx, cfg, bin, dataDir, port, runAs)
		if errors.Is(err, errPortInUse) && cfg.Port == 0 && attempt < portAttempts {
			continue
		}
		return p, url, err
	}
}

// postgresDefaults are the server settings of every devstack Postgres
// (cfg.Settings override them). Durability stays at Postgres' own
// defaults, stated here so no one turns them off by accident: fsync,
// synchronous_commit and full_page_writes are on, so a committed
// transaction survives a crash of the process or the machine.
//
// The rest trims the CPU a write-heavy run (every job's rows and audit
// events) spends beside the statements themselves:
//   - shared_buffers 256MB (default 128MB): the jobs table (fillfactor 40)
//     and the audit partition of a 100k-job run outgrow 128MB, and every
//     page read back from the kernel's cache is a system call and a copy;
//   - max_wal_size 4GB and checkpoint_timeout 15min (defaults 1GB, 5min):
//     the first change of a page after a checkpoint writes the whole 8kB
//     page to the WAL (a full-page image, CRC'd and copied), so fewer
//     checkpoints mean far fewer such images; crash recovery replays at
//     most 4GB of WAL;
//   - wal_buffers 16MB: a batch's WAL fits without a write per block;
//   - jit off: compiling a plan costs milliseconds of CPU, more than the
//     short statements of a job pipeline ever win back.
//
// wal_compression stays off: it compresses the full-page images, which
// the settings above make rare, at a CPU price on every one.
var postgresDefaults = map[string]string{
	"fsync":              "on",
	"synchronous_commit": "on",
	"full_page_writes":   "on",
	"shared_buffers":     "256MB",
	"wal_buffers":        "16MB",
	"max_wal_size":       "4GB",
	"checkpoint_timeout": "15min",
	"jit":                "off",
}

// statStatementsInstalled reports whether the server in bin ships the
// pg_stat_statements module (Debian's postgresql package does), found
// beside bin in its lib directory. Loaded, it counts every statement by
// its normalized text, which is how the benchmark reports Postgres
// statements per job (bench/probe.go) and how a developer sees what the
// stack asks of Postgres (CREATE EXTENSION pg_stat_statements, then its
// view). Without the file the server starts without it: loading a missing
// library would stop it from starting at all.
func statStatementsInstalled(bin string) bool {
	st, err := os.Stat(filepath.Join(bin, "..", "lib", "pg_stat_statements.so"))
	return err == nil && !st.IsDir()
}

// runPostgres starts the server on port and waits until it is usable.
func runPostgres(ctx context.Context, cfg PostgresConfig, bin, dataDir string, port int, runAs *osUser) (*Process, string, error) {
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": dataDir,
		"logging_collector":       "off",
	}
	for k, v := range postgresDefaults {
		settings[k] = v
	}
	if statStatementsInstalled(bin) {
		settings["shared_preload_libraries"] = "pg_stat_statements"
	}
	// A unix socket path is limited to 107 bytes; below a deep directory
	// the server would refuse to start, so it then listens on TCP only.
	if len(dataDir)+len("/.s.PGSQL.65535.lock") > 107 {
		settings["unix_socket_directories"] = ""
	}
	for k, v := range cfg.Settings {
		settings[k] = v
	}
	args := []string{"-D", dataDir}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}

	logOffset := fileSize(cfg.LogFile)
	p, err := startProcess(processSpec{
		name:    "postgres",
		path:    filepath.Join(bin, "postgres"),
		args:    args,
		dir:     dataDir,
		cred:    runAs.credential(),
		stopSig: syscall.SIGINT, // fast shutdown; SIGTERM would wait for clients
		logPath: cfg.LogFile,
	})
	if err != nil {
		return nil, "", err
	}
	host := fmt.Sprintf("127.0.0.1:%d", port)
	adminURL := fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable&connect_timeout=5", superuser, host)
	if err := waitPostgres(ctx, p, adminURL, dataDir, cfg.Database, logOffset); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(stopCtx)
		if strings.Contains(logTail(cfg.LogFile, logOffset), "could not bind") ||
			strings.Contains(logTail(cfg.LogFile, logOffset), "Address already in use") {
			return nil, "", fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return nil, "", err
	}
	return p, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", superuser, host, cfg.Database), nil
}

// waitPostgres polls until our server accepts connections, then creates db.
// Another server that already holds the port must not pass for ours, so the
// data directory is compared.
func waitPostgres(ctx context.Context, p *Process, adminURL, dataDir, db string, logOffset int64) error {
	var lastErr error
	for {
		select {
		case <-p.Done():
			return p.exitedEarly(logOffset)
		default:
		}
		conn, err := pgx.Connect(ctx, adminURL)
		if err == nil {
			var dir string
			err = conn.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dir)
			if err == nil && filepath.Clean(dir) != dataDir {
				err = fmt.Errorf("port answered by the server of %s", dir)
			}
			if err == nil {
				err = createDatabase(ctx, conn, db)
				conn.Close(context.Background())
				if err != nil {
					return fmt.Errorf("devstack: postgres: %w", err)
				}
				return nil
			}
			conn.Close(context.Background())
		}
		lastErr = err
		select {
		case <-p.Done():
			return p.exitedEarly(logOffset)
		case <-ctx.Done():
			return fmt.Errorf("devstack: postgres not ready (%v): %w; log %s:\n%s", lastErr, ctx.Err(), p.LogPath(), logTail(p.LogPath(), logOffset))
		case <-time.After(pollInterval):
		}
	}
}

// createDatabase creates db unless it exists.
func createDatabase(ctx context.Context, conn *pgx.Conn, db string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %q: %w", db, err)
	}
	if exists {
		return nil
	}
	_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %q: %w", db, err)
	}
	return nil
}

// initdbIfNeeded creates a cluster in dataDir unless it holds one, and checks
// that an existing cluster matches the binaries' major version.
func initdbIfNeeded(ctx context.Context, bin, dataDir, logFile string, runAs *osUser) error {
	binMajor, err := postgresMajor(ctx, bin)
	if err != nil {
		return err
	}
	if v, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION")); err == nil {
		if got := strings.TrimSpace(string(v)); got != binMajor {
			return fmt.Errorf("devstack: %s holds a PostgreSQL %s cluster but %s is PostgreSQL %s: remove the directory or set BinDir to PostgreSQL %s binaries", dataDir, got, bin, binMajor, got)
		}
		return nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", dataDir,
		"--username="+superuser,
		"--auth=trust",
		"--encoding=UTF8",
		"--no-locale",
	)
	cmd.Dir = dataDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: runAs.credential(), Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("devstack: initdb %s: %w:\n%s", dataDir, err, strings.TrimSpace(string(out)))
	}
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		_, _ = f.Write(out)
		_ = f.Close()
	}
	return nil
}

var pgVersionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// postgresMajor returns the major version of the server binary in bin.
func postgresMajor(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("devstack: %s --version: %w", filepath.Join(bin, "postgres"), err)
	}
	m := pgVersionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("devstack: cannot parse postgres version from %q", strings.TrimSpace(string(out)))
	}
	return string(m[1]), nil
}

// postgresBinDir finds the directory that holds initdb and postgres.
func postgresBinDir(configured string) (string, error) {
	has := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.IsDir() {
				return false
			}
		}
		return true
	}
	if configured != "" {
		if !has(configured) {
			return "", fmt.Errorf("devstack: BinDir %s holds no initdb and postgres", configured)
		}
		return configured, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return dir, nil
		}
	}
	// Debian and Ubuntu keep server binaries off PATH, one directory per
	// major version; take the newest.
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	if path, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(path)) {
		return filepath.Dir(path), nil
	}
	return "", errors.New("devstack: PostgreSQL server binaries (initdb, postgres) not found; run scripts/install-deps.sh (Debian: apt-get install postgresql) or set BinDir")
}

// osUser is the account a server runs as; nil means the current user.
type osUser struct {
	name     string
	uid, gid uint32
	groups   []uint32
}

func (u *osUser) credential() *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
}

// postgresRunAs returns the postgres OS user when running as root (the
// server refuses to run as root), nil otherwise.
func postgresRunAs() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("devstack: running as root, and PostgreSQL refuses to run as root, but there is no `postgres` OS user to run it as (%w); install the postgresql package or run as another user", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("devstack: postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("devstack: postgres gid %q: %w", u.Gid, err)
	}
	ou := &osUser{name: u.Username, uid: uint32(uid), gid: uint32(gid)}
	gids, _ := u.GroupIds()
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			ou.groups = append(ou.groups, uint32(n))
		}
	}
	return ou, nil
}

// preparePostgresDataDir creates dataDir with the 0700 mode the server
// demands and, when the server runs as another user, hands the directory
// over to it after checking that it can reach it.
func preparePostgresDataDir(dataDir string, runAs *osUser) error {
	// Parents we create must stay enterable by the server's user.
	if err := os.MkdirAll(filepath.Dir(dataDir), 0o755); err != nil {
		return fmt.Errorf("devstack: create postgres data dir: %w", err)
	}
	if err := os.Mkdir(dataDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("devstack: create postgres data dir: %w", err)
	}
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return fmt.Errorf("devstack: postgres data dir: %w", err)
	}
	if runAs == nil {
		return nil
	}
	if err := checkSearchable(filepath.Dir(dataDir), runAs); err != nil {
		return err
	}
	return filepath.WalkDir(dataDir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if s, ok := st.Sys().(*syscall.Stat_t); ok && s.Uid == runAs.uid && s.Gid == runAs.gid {
			return nil
		}
		if err := os.Lchown(path, int(runAs.uid), int(runAs.gid)); err != nil {
			return fmt.Errorf("devstack: hand %s to the %s user: %w", path, runAs.name, err)
		}
		return nil
	})
}

// checkSearchable reports an error unless u may enter dir and all of its
// ancestors.
func checkSearchable(dir string, u *osUser) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("devstack: %w", err)
		}
		s, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		mode := st.Mode().Perm()
		var ok2 bool
		switch {
		case s.Uid == u.uid:
			ok2 = mode&0o100 != 0
		case s.Gid == u.gid || slices.Contains(u.groups, s.Gid):
			ok2 = mode&0o010 != 0
		default:
			ok2 = mode&0o001 != 0
		}
		if !ok2 {
			return fmt.Errorf("devstack: PostgreSQL runs as the %q OS user, which cannot enter %s (mode %v, owner uid %d): put DataDir below a directory it can reach, or make that directory searchable (chmod o+x)", u.name, d, mode, s.Uid)
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}
