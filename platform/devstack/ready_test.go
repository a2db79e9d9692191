package devstack

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// The ready file round-trips, is private to the user, and its env file,
// sourced by a shell, sets exactly its variables, quotes and all.
func TestReadyFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := Ready{PID: 42, APIURL: "http://127.0.0.1:1", Tenant: "default", APIKey: "fry_k", AdminKey: "fry_admin_k",
		KafkaBrokers: []string{"127.0.0.1:2"}, TopicPrefix: "ferry.", PostgresURL: "postgres://u:p@h/db", RedisURL: "redis://h/0",
		SecretKey: "c2VjcmV0", DataDir: dir}
	r.Env = r.JoinEnv(1, 1, 2, "127.0.0.0/8")
	r.Env["FERRY_QUOTED"] = `it's "quoted" $HOME` + "`x`"
	jsonPath, envPath := filepath.Join(dir, "sub", "dev.json"), filepath.Join(dir, "dev.env")
	if err := WriteReady(r, jsonPath, envPath); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReady(jsonPath)
	r.Version = ReadyVersion
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("ReadReady: %+v, %v; want %+v", got, err, r)
	}
	for _, p := range []string{jsonPath, envPath} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v; want mode 0600", p, err, fi)
		}
	}
	out, err := exec.Command("bash", "-c", `source "$1"; printf %s "$FERRY_QUOTED|$FERRY_URL|$FERRY_HTTP_ADDR"`, "bash", envPath).Output()
	if want := r.Env["FERRY_QUOTED"] + "|http://127.0.0.1:1|127.0.0.1:0"; err != nil || string(out) != want {
		t.Fatalf("sourced env: %q, %v; want %q", out, err, want)
	}

	// WaitReady waits for the file of the right process.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := WaitReady(ctx, jsonPath, 43); err == nil {
		t.Fatal("WaitReady accepted the file of another process")
	}
	if got, err := WaitReady(context.Background(), jsonPath, 42); err != nil || got.PID != 42 {
		t.Fatalf("WaitReady: %+v, %v", got, err)
	}
}

// Setenv fills in what the environment lacks and leaves what it sets.
func TestReadySetenv(t *testing.T) {
	t.Setenv("FERRY_TEST_READY_A", "mine")
	t.Setenv("FERRY_TEST_READY_B", "") // registers the restore
	os.Unsetenv("FERRY_TEST_READY_B")
	r := Ready{Env: map[string]string{"FERRY_TEST_READY_A": "theirs", "FERRY_TEST_READY_B": "theirs"}}
	if err := r.Setenv(); err != nil {
		t.Fatal(err)
	}
	if a, b := os.Getenv("FERRY_TEST_READY_A"), os.Getenv("FERRY_TEST_READY_B"); a != "mine" || b != "theirs" {
		t.Fatalf("A=%q B=%q, want mine and theirs", a, b)
	}
}
