package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The clients for other languages (clients/): each runs its end-to-end
// script against the whole stack, and the TypeScript types must be what the
// generator makes of services/api/openapi.json today.

const (
	tsClientDir = "../../clients/typescript"
	pyClientDir = "../../clients/python"
	openAPIFile = "../../services/api/openapi.json"
)

// runScript runs name with args in dir with the stack's URL and key, and
// returns its output; it must exit 0.
func runScript(t *testing.T, e *e2e, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "FERRY_URL="+e.base, "FERRY_API_KEY="+e.key, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestPythonClient checks the Python client's operations against
// openapi.json, then runs its end-to-end script against the stack.
func TestPythonClient(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is not installed: run `make test` (scripts/install-deps.sh installs it)")
	}
	e := startStack(t, nil)
	runScript(t, e, pyClientDir, "python3", "-m", "unittest", "discover", "-s", ".", "-t", ".")
	out := runScript(t, e, pyClientDir, "python3", "e2e.py")
	if !strings.Contains(out, `"ok": true`) {
		t.Fatalf("e2e.py:\n%s", out)
	}
}

// TestTypeScriptClient compiles the TypeScript client and its end-to-end
// script with tsc (type-checking them against the generated types) and
// runs the script with node against the stack.
func TestTypeScriptClient(t *testing.T) {
	work := tsWorkdir(t)
	if out, err := command(work, "npm", "run", "build").CombinedOutput(); err != nil {
		t.Fatalf("npm run build (tsc): %v\n%s", err, out)
	}
	e := startStack(t, nil)
	out := runScript(t, e, work, "node", "dist/test/e2e.js")
	if !strings.Contains(out, `"ok":true`) {
		t.Fatalf("e2e.js:\n%s", out)
	}
}

// TestTypeScriptTypesUpToDate regenerates src/schema.d.ts from openapi.json
// with the package's own `npm run generate` and compares it with the
// committed file.
func TestTypeScriptTypesUpToDate(t *testing.T) {
	work := tsWorkdir(t)
	if out, err := command(work, "npm", "run", "generate").CombinedOutput(); err != nil {
		t.Fatalf("npm run generate: %v\n%s", err, out)
	}
	fresh, err := os.ReadFile(filepath.Join(work, "src", "schema.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(tsClientDir, "src", "schema.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fresh, committed) {
		t.Fatal("clients/typescript/src/schema.d.ts is not what openapi-typescript makes of services/api/openapi.json: " +
			"run `cd clients/typescript && npm ci && npm run generate` and commit the result")
	}
}

func command(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false")
	return cmd
}

// tsWorkdir copies the TypeScript client into a temporary tree shaped like
// the repository (clients/typescript beside services/api/openapi.json, so
// the package's scripts run unchanged) with node_modules linked from the
// npm cache of tsDeps.
func tsWorkdir(t *testing.T) string {
	t.Helper()
	modules := tsDeps(t)
	root := t.TempDir()
	work := filepath.Join(root, "clients", "typescript")
	for _, f := range []string{"package.json", "package-lock.json", "tsconfig.json"} {
		copyFile(t, filepath.Join(tsClientDir, f), filepath.Join(work, f))
	}
	for _, dir := range []string{"src", "test"} {
		if err := os.CopyFS(filepath.Join(work, dir), os.DirFS(filepath.Join(tsClientDir, dir))); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, openAPIFile, filepath.Join(root, "services", "api", "openapi.json"))
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	return work
}

// tsDeps returns a node_modules directory holding the TypeScript client's
// locked dependencies, installed with `npm ci` into the user's cache
// directory once per package-lock.json.
func tsDeps(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: run `make test` (scripts/install-deps.sh installs node and npm)", tool)
		}
	}
	lock, err := os.ReadFile(filepath.Join(tsClientDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "ferry", "ts-client-deps", hex.EncodeToString(sum[:8]))
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, ".package-lock.json")); err == nil {
		return modules
	}
	// Install beside, then rename: a concurrent or interrupted run never
	// leaves a half-installed cache behind.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	copyFile(t, filepath.Join(tsClientDir, "package.json"), filepath.Join(tmp, "package.json"))
	copyFile(t, filepath.Join(tsClientDir, "package-lock.json"), filepath.Join(tmp, "package-lock.json"))
	if out, err := command(tmp, "npm", "ci", "--ignore-scripts").CombinedOutput(); err != nil {
		t.Fatalf("npm ci of clients/typescript failed (is the npm registry reachable?): %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(modules); serr != nil { // not a concurrent run that won
			t.Fatal(err)
		}
	}
	return modules
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
