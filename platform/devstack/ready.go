package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ReadyVersion is the version of the ready file format; fields are only
// added within a version.
const ReadyVersion = 1

// Ready describes a running `ferry dev`: everything a client, a worker of
// your own, a benchmark or a test needs to reach it. `ferry dev` writes it
// as JSON (FERRY_DATA_DIR/dev.json, or --ready-file) and as a shell file of
// exports (dev.env) once its /readyz answers 200, and removes both when it
// stops: the file appearing is the signal that the stack takes work.
//
// The file holds secrets (the admin key, the dev tenant's API key and the
// key that opens stored signing secrets), so it is written with mode 0600.
// It is a development convenience: a production deployment has no such file.
type Ready struct {
	Version int `json:"version"`
	// PID is the `ferry dev` process; a file whose PID is not the process
	// you started is a stale one from an earlier run.
	PID int `json:"pid"`
	// APIURL is the base URL of the HTTP API (http://host:port).
	APIURL string `json:"api_url"`
	// Tenant is the tenant `ferry dev` bootstraps; APIKey is its key.
	Tenant string `json:"tenant"`
	APIKey string `json:"api_key"`
	// AdminKey is the operator key (admin routes).
	AdminKey     string   `json:"admin_key"`
	KafkaBrokers []string `json:"kafka_brokers"`
	TopicPrefix  string   `json:"topic_prefix"`
	PostgresURL  string   `json:"postgres_url"`
	RedisURL     string   `json:"redis_url"`
	// SecretKey is FERRY_SECRET_KEY (base64): the key every api, worker
	// and webhooks process needs to seal and open signing secrets.
	SecretKey string `json:"secret_key"`
	// DataDir is FERRY_DATA_DIR, absolute.
	DataDir string `json:"data_dir"`
	// Env holds the environment variables a Ferry process of your own (a
	// worker built with the SDK, the `ferry jobs` CLI) needs to join this
	// stack; dev.env exports the same.
	Env map[string]string `json:"env"`
}

// JoinEnv returns the variables a process needs to join the stack r
// describes, given the topic layout the stack uses (replication factor,
// min.insync.replicas, partitions) and the CIDRs outbound calls may reach.
func (r Ready) JoinEnv(replication, minInsync, partitions int, outboundAllow string) map[string]string {
	env := map[string]string{
		"FERRY_URL":               r.APIURL,
		"FERRY_API_KEY":           r.APIKey,
		"FERRY_ADMIN_KEY":         r.AdminKey,
		"FERRY_KAFKA_BROKERS":     strings.Join(r.KafkaBrokers, ","),
		"FERRY_TOPIC_PREFIX":      r.TopicPrefix,
		"FERRY_TOPIC_REPLICATION": strconv.Itoa(replication),
		"FERRY_TOPIC_MIN_INSYNC":  strconv.Itoa(minInsync),
		"FERRY_TOPIC_PARTITIONS":  strconv.Itoa(partitions),
		"FERRY_POSTGRES_URL":      r.PostgresURL,
		"FERRY_REDIS_URL":         r.RedisURL,
		"FERRY_SECRET_KEY":        r.SecretKey,
		"FERRY_DATA_DIR":          r.DataDir,
		"FERRY_OUTBOUND_ALLOW":    outboundAllow,
		// A joining process serves its own /healthz and /metrics: on a free
		// port, not on the stack's.
		"FERRY_HTTP_ADDR": "127.0.0.1:0",
	}
	for k, v := range env {
		if v == "" {
			delete(env, k)
		}
	}
	return env
}

// Setenv sets each variable of r.Env that the environment does not set
// already, so that a process of your own started with only the ready file
// (service.Main reads the environment) joins the stack, while a variable
// set by hand still wins.
func (r Ready) Setenv() error {
	for k, v := range r.Env {
		if _, set := os.LookupEnv(k); set {
			continue
		}
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}

// WriteReady writes r as JSON to jsonPath and, when envPath is not empty,
// as `export NAME='value'` lines of r.Env to envPath. Each file is written
// to a temporary file (mode 0600) and renamed into place, so a reader never
// sees half a file.
func WriteReady(r Ready, jsonPath, envPath string) error {
	r.Version = ReadyVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(jsonPath, append(b, '\n')); err != nil {
		return err
	}
	if envPath == "" {
		return nil
	}
	return writeFileAtomic(envPath, []byte(EnvFile(r.Env)))
}

// EnvFile renders env as a POSIX shell file of sorted `export` lines, each
// value single-quoted, for `source`.
func EnvFile(env map[string]string) string {
	var b strings.Builder
	b.WriteString("# Written by `ferry dev`: source it to join the running stack. Holds secrets.\n")
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(env[k], "'", `'\''`))
	}
	return b.String()
}

func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ReadReady reads a ready file.
func ReadReady(path string) (Ready, error) {
	var r Ready
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", path, err)
	}
	if r.Version != ReadyVersion {
		return r, fmt.Errorf("%s: version %d, want %d", path, r.Version, ReadyVersion)
	}
	return r, nil
}

// WaitReady waits until path holds the ready file of process pid (0: any
// process), polling, until ctx ends. Callers that started the process
// cancel ctx when it exits.
func WaitReady(ctx context.Context, path string, pid int) (Ready, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := ReadReady(path)
		if err == nil && (pid == 0 || r.PID == pid) {
			return r, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return Ready{}, fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
