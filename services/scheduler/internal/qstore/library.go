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
// were defined again on every call: about a third of what an idle dispatch
// step costs Redis, and the calls that dispatch a few jobs at 1,000 jobs a
// second are mostly that fixed cost (docs/performance.md, Rounds 14, 20
// and 21). A library's top level runs once, at load; each function body
// then starts by resetting the helpers' per-call state (fair_begin,
// gate_begin, route_begin). The same sources still run as plain scripts
// (the rarer flow, reset, resume and prune calls, and the tests that count
// a script's commands), which is why the bodies, not the wrapper, call the
// begin functions.
//
// The library and its functions are named after a hash of their code, so
// scheduler replicas of different versions sharing one Redis during a
// rolling upgrade each call their own code; a version's library stays
// loaded after the last replica of it is gone (a few hundred KB of
// compiled Lua; FUNCTION DELETE removes it). A Redis that lost its
// functions (restarted without persistence, FUNCTION FLUSH) answers
// "Function not found": the call loads the library and runs again.
var (
	libraryVersion = codeVersion(prelude, applySrc, dispatchSrc)
	applyFunc      = redisFunction("ferry_apply_" + libraryVersion)
	dispatchFunc   = redisFunction("ferry_dispatch_" + libraryVersion)
	library        = buildLibrary("ferry_sched_"+libraryVersion, prelude,
		functionBody{applyFunc, applySrc}, functionBody{dispatchFunc, dispatchSrc})
)

// redisFunction is the name of one function of the library.
type redisFunction string

// functionBody is the code of a function: a script's source.
type functionBody struct {
	fn   redisFunction
	body string
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
// helpers at its top level, then each body wrapped as the function that
// registers under its name (a body reads its arguments from ARGV, as it
// does as a script).
func buildLibrary(name, shared string, bodies ...functionBody) string {
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	b.WriteString(shared)
	for _, f := range bodies {
		fmt.Fprintf(&b, "\nredis.register_function('%s', function(KEYS, ARGV)\n%s\nend)\n", f.fn, f.body)
	}
	return b.String()
}

// loadLibrary loads the library into Redis (again, if it is there).
func loadLibrary(ctx context.Context, rdb redis.Cmdable) error {
	if err := rdb.FunctionLoadReplace(ctx, library).Err(); err != nil {
		return fmt.Errorf("qstore: load functions: %w", err)
	}
	return nil
}

// functionMissing reports whether err is Redis's answer to an FCALL of a
// function it does not have.
func functionMissing(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// call runs fn with args, loading the library first if Redis lacks it.
func (fn redisFunction) call(ctx context.Context, rdb redis.Cmdable, args ...any) *redis.Cmd {
	cmd := rdb.FCall(ctx, string(fn), nil, args...)
	if functionMissing(cmd.Err()) {
		if err := loadLibrary(ctx, rdb); err != nil {
			cmd.SetErr(err)
			return cmd
		}
		cmd = rdb.FCall(ctx, string(fn), nil, args...)
	}
	return cmd
}
