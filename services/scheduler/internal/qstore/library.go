package qstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The two scripts of the job path, apply and dispatch, run as the functions
// of one Redis functions library (FUNCTION LOAD, FCALL) rather than as
// EVALSHA scripts. An EVALSHA call runs its script's whole chunk every
// time, so the ~900 lines of shared helpers (prelude: ~90 local functions)
// and apply's ops were defined again on every call: more than half of what
// an apply call with a few jobs costs Redis, and at 1,000 jobs a second
// the calls hold a few jobs each (docs/performance.md, Rounds 14, 20 and
// 21). A library's top level runs once, at load: each source defines its
// helpers there and an entry function (apply_run, dispatch_run) that a
// call runs with its ARGV, which resets the helpers' per-call state first
// (fair_begin, gate_begin, route_begin, and apply's own). The same sources
// still run as one EVAL chunk (evalSource, in the tests) where a test
// counts what a call does; the rarer flow, reset, resume and prune scripts
// prepend the helpers they need and call the begin functions themselves.
//
// The library and its functions are named after a hash of their code, so
// scheduler replicas of different versions sharing one Redis during a
// rolling upgrade each call their own code. A scheduler that starts
// removes the libraries of other versions (dropOtherVersions), so they do
// not pile up with every deploy; a replica of another version still
// running finds its functions missing and loads them again. A Redis that
// lost its functions (restarted without persistence, FUNCTION FLUSH)
// answers "Function not found": the call loads the library and runs again.
// That path never removes another version's library, or two versions
// would remove each other's in turn.
//
// The third function, apply_dispatch, runs an apply and then the dispatch
// steps it woke in one call (applydispatch.lua); its source comes last,
// after the two entries it calls.
var (
	libraryVersion      = codeVersion(prelude, applySrc, dispatchSrc, applyDispatchSrc)
	applyScript         = jobScript{fn: "ferry_apply_" + libraryVersion, entry: "apply_run", src: applySrc}
	dispatchScript      = jobScript{fn: "ferry_dispatch_" + libraryVersion, entry: "dispatch_run", src: dispatchSrc}
	applyDispatchScript = jobScript{fn: "ferry_apply_dispatch_" + libraryVersion, entry: "apply_dispatch_run", src: applyDispatchSrc}
	libraryName         = libraryPrefix + libraryVersion
	library             = buildLibrary(libraryName, applyScript, dispatchScript, applyDispatchScript)
)

// libraryPrefix starts the name of every version's library.
const libraryPrefix = "ferry_sched_"

// jobScript is a script of the job path: its source defines entry, the Lua
// function a call runs with its ARGV, registered as the Redis function fn.
type jobScript struct {
	fn    string
	entry string
	src   string
}

// codeVersion is a short hash of the sources.
func codeVersion(srcs ...string) string {
	h := sha1.New()
	for _, s := range srcs {
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// buildLibrary is the FUNCTION LOAD source of library name: the shared
// helpers, then each script's source and the registration of its function.
func buildLibrary(name string, scripts ...jobScript) string {
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	b.WriteString(prelude)
	for _, j := range scripts {
		fmt.Fprintf(&b, "\n%s\nredis.register_function('%s', function(KEYS, ARGV) return %s(ARGV) end)\n", j.src, j.fn, j.entry)
	}
	return b.String()
}

// loadLibrary loads the library into Redis (again, if it is there).
func loadLibrary(ctx context.Context, rdb redis.Cmdable) error {
	if err := rdb.FunctionLoadReplace(ctx, library).Err(); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			return fmt.Errorf("qstore: the scheduler needs Redis 7.0 or newer (FUNCTION LOAD): %w", err)
		}
		return fmt.Errorf("qstore: load functions: %w", err)
	}
	return nil
}

// dropOtherVersions removes the libraries of the scheduler's other versions.
func dropOtherVersions(ctx context.Context, rdb redis.Cmdable) error {
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: libraryPrefix + "*"}).Result()
	if err != nil {
		return fmt.Errorf("qstore: list functions: %w", err)
	}
	for _, l := range libs {
		if !strings.HasPrefix(l.Name, libraryPrefix) || l.Name == libraryName {
			continue
		}
		// Another scheduler starting at the same time may have removed it
		// first: Redis answers "Library not found".
		if err := rdb.FunctionDelete(ctx, l.Name).Err(); err != nil && !strings.Contains(err.Error(), "not found") {
			return fmt.Errorf("qstore: drop functions %s: %w", l.Name, err)
		}
	}
	return nil
}

// functionMissing reports whether err is Redis's answer to an FCALL of a
// function it does not have.
func functionMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// reloadTries bounds how often a call loads the library again and retries
// when Redis answers that it lacks the function: more than once, because
// another client may remove the library between the load and the retry (a
// FUNCTION FLUSH, or a test that removes it on purpose).
const reloadTries = 3

// withLibrary runs calls, and while Redis answers that it lacks the
// library's functions, loads the library and runs them again: the one
// home of that rule. The scripts are idempotent over at-least-once input,
// so a call that did run before another failed may run twice.
func withLibrary(ctx context.Context, rdb redis.Cmdable, calls func() error) error {
	err := calls()
	for try := 0; try < reloadTries && functionMissing(err); try++ {
		if err := loadLibrary(ctx, rdb); err != nil {
			return err
		}
		err = calls()
	}
	return err
}

// call runs j's function with args (withLibrary).
func (j jobScript) call(ctx context.Context, rdb redis.Cmdable, args ...any) *redis.Cmd {
	var cmd *redis.Cmd
	err := withLibrary(ctx, rdb, func() error {
		cmd = rdb.FCall(ctx, j.fn, nil, args...)
		return cmd.Err()
	})
	if err != nil {
		cmd.SetErr(err)
	}
	return cmd
}
