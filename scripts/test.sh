#!/usr/bin/env bash
# `make test`: vets, format-checks and tests every module of the workspace
# against real PostgreSQL and Redis servers and the embedded Kafka broker.
#
# It installs missing dependencies (scripts/install-deps.sh), starts
# throw-away PostgreSQL and Redis servers on free ports with their data in a
# temporary directory (platform/devstack/cmd/testinfra), exports
# FERRY_TEST_POSTGRES_URL and FERRY_TEST_REDIS_URL, and runs, in each module
# listed by `go list -m`: gofmt -l, go vet ./..., go test -race ./... .
# A failing module does not stop the others; the exit status is non-zero if
# any failed. The servers are stopped on exit, however the script ends.
#
# Environment:
#   MODULES   modules to run, by directory or module path, separated by
#             spaces or commas (e.g. MODULES="platform services/api");
#             defaults to all
#   TEST_RUN  passed to go test -run (e.g. TEST_RUN='TestRedis|TestKafka')
#   TEST_TIMEOUT  go test -timeout per module; defaults to 12m
#   FERRY_TEST_POSTGRES_URL and FERRY_TEST_REDIS_URL, when both are set,
#             name servers of your own and no servers are started.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

"$root/scripts/install-deps.sh"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ferry-test.XXXXXX")
# PostgreSQL runs as the postgres OS user when we are root: it must be able
# to enter the directory.
chmod 755 "$tmp"
infra_pid=
cleanup() {
	local rc=$?
	if [[ -n $infra_pid ]]; then
		# testinfra stops both servers on SIGTERM; if it were killed instead,
		# the servers would still get their parent-death signal.
		kill -TERM "$infra_pid" 2>/dev/null || true
		wait "$infra_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ -n ${FERRY_TEST_POSTGRES_URL:-} && -n ${FERRY_TEST_REDIS_URL:-} ]]; then
	echo "test: using the servers of FERRY_TEST_POSTGRES_URL and FERRY_TEST_REDIS_URL"
else
	go build -o "$tmp/testinfra" ./platform/devstack/cmd/testinfra
	# In a session of its own, so that a Ctrl-C reaches the tests but not the
	# servers; cleanup stops them.
	setsid "$tmp/testinfra" -dir "$tmp/data" -env-file "$tmp/env" >"$tmp/testinfra.log" 2>&1 &
	infra_pid=$!
	for ((i = 0; ; i++)); do
		[[ -f $tmp/env ]] && break
		if ! kill -0 "$infra_pid" 2>/dev/null || ((i >= 1200)); then
			echo "test: the test servers did not start:" >&2
			cat "$tmp/testinfra.log" >&2
			for log in "$tmp"/data/*/*.log; do
				[[ -f $log ]] && { echo "--- $log" >&2; tail -n 30 "$log" >&2; }
			done
			exit 1
		fi
		sleep 0.1
	done
	# shellcheck source=/dev/null
	source "$tmp/env"
	export FERRY_TEST_POSTGRES_URL FERRY_TEST_REDIS_URL
	echo "test: postgres $FERRY_TEST_POSTGRES_URL, redis $FERRY_TEST_REDIS_URL"
fi

# selected reports whether the module in directory $1 with path $2 is in MODULES.
selected() {
	local rel=${1#"$root"/} want
	[[ -z ${MODULES:-} ]] && return 0
	for want in ${MODULES//,/ }; do
		want=${want#./}
		want=${want%/}
		[[ $want == "$rel" || $want == "$2" ]] && return 0
	done
	return 1
}

modules=$(go list -m -f '{{.Dir}} {{.Path}}')
passed=0
failed=0
failures=()
while read -r dir path <&3; do
	selected "$dir" "$path" || continue
	rel=${dir#"$root"/}
	echo "=== $rel ($path)"
	ok=1
	unformatted=$(cd "$dir" && gofmt -l .)
	if [[ -n $unformatted ]]; then
		echo "gofmt: these files need gofmt -w:"
		echo "$unformatted" | sed "s|^|  $rel/|"
		ok=0
	fi
	(cd "$dir" && go vet ./...) || ok=0
	args=(-race -count=1 -timeout "${TEST_TIMEOUT:-12m}")
	[[ -n ${TEST_RUN:-} ]] && args+=(-run "$TEST_RUN")
	(cd "$dir" && go test "${args[@]}" ./...) || ok=0
	if ((ok)); then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		failures+=("$rel")
	fi
	if [[ -n $infra_pid ]] && ! kill -0 "$infra_pid" 2>/dev/null; then
		echo "test: the test servers exited during the run:" >&2
		cat "$tmp/testinfra.log" >&2
		exit 1
	fi
done 3<<<"$modules"

if ((passed + failed == 0)); then
	echo "test: MODULES=${MODULES:-} matches no module of go.work" >&2
	exit 1
fi
if ((failed > 0)); then
	echo "failed modules: ${failures[*]}"
fi
echo "$passed passed, $failed failed"
((failed == 0))
