#!/usr/bin/env bash
# Installs what `make dev` and `make test` need besides Go: PostgreSQL server
# binaries, redis-server, kcat, a C compiler (`go test -race` needs cgo), and
# python3 and node (the signature verification examples of docs/http-jobs.md),
# npm (the TypeScript client's tests) and chromium (the console's browser tests
# drive it headless). Idempotent: it does nothing when they are
# present. As root on Debian/Ubuntu it installs what is missing with apt-get;
# otherwise it names what is missing and fails.
#
# Ferry runs its own PostgreSQL and Redis servers on ports of its own (see
# platform/devstack), so the distribution's services are never used: the
# install creates no "main" PostgreSQL cluster and starts no service.
set -euo pipefail

missing=()

have_postgres() {
	local d
	if command -v pg_config >/dev/null 2>&1; then
		d=$(pg_config --bindir 2>/dev/null || true)
		[[ -n "$d" && -x "$d/initdb" && -x "$d/postgres" ]] && return 0
	fi
	for d in /usr/lib/postgresql/*/bin; do
		[[ -x "$d/initdb" && -x "$d/postgres" ]] && return 0
	done
	command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1
}

have_postgres || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
# The verification examples of docs/http-jobs.md run in cmd/ferry's tests.
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
# The TypeScript client's tests install its locked packages with npm ci.
command -v npm >/dev/null 2>&1 || missing+=(npm)
# The console's browser tests (cmd/ferry/console_test.go) drive headless Chromium.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)

if ((${#missing[@]} == 0)); then
	exit 0
fi

fail() {
	echo "install-deps: $*" >&2
	exit 1
}

if [[ $(id -u) -ne 0 ]]; then
	fail "missing: ${missing[*]}. Install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}; macOS: brew install postgresql redis kcat python node, and Xcode's command line tools) or run: sudo $0"
fi
command -v apt-get >/dev/null 2>&1 ||
	fail "missing: ${missing[*]}, and there is no apt-get here; install them with your package manager"

echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive

# No "main" cluster on 5432: Ferry starts its own servers.
mkdir -p /etc/postgresql-common/createcluster.d
if [[ ! -e /etc/postgresql-common/createcluster.d/ferry.conf ]]; then
	echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/ferry.conf
fi

# Start no service during the install (the convention Debian's invoke-rc.d and
# deb-systemd-invoke honour); ours take their place on ports of their own.
policy=/usr/sbin/policy-rc.d
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\n# written by ferry scripts/install-deps.sh for the install only\nexit 101\n' >"$policy"
	chmod 755 "$policy"
	trap 'rm -f "$policy"' EXIT
fi

# Refresh the package lists only when there are none or the install fails
# for want of fresh ones.
install() { apt-get install -y --no-install-recommends "${missing[@]}"; }
if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
	apt-get update
fi
if ! install; then
	apt-get update
	install || fail "apt-get install ${missing[*]} failed"
fi

have_postgres || fail "postgresql installed but initdb/postgres not found"
command -v redis-server >/dev/null 2>&1 || fail "redis-server not found after install"
command -v kcat >/dev/null 2>&1 || fail "kcat not found after install"
command -v gcc >/dev/null 2>&1 || fail "gcc not found after install"
command -v chromium >/dev/null 2>&1 || fail "chromium not found after install"
echo "install-deps: done" >&2
