// Package devstack starts the local infrastructure that `ferry dev` and the
// test suites run against: PostgreSQL and Redis as child processes with their
// data in a directory of your choosing, and Kafka as an embedded kfake broker,
// inside the calling process (tests) or in a child process (`ferry dev`).
//
// # Child processes
//
// [StartPostgres] and [StartRedis] return a [*Process]. Children listen on
// 127.0.0.1 only, run in their own process group (so a Ctrl-C in the terminal
// reaches the parent, which then stops them in order), and carry a parent-death
// signal, so a test binary or a dev run that is killed does not leave servers
// behind. [Process.Stop] asks the server to shut down cleanly and kills it if
// it has not exited in time.
//
// PostgreSQL refuses to run as root. When the caller is root, the server and
// initdb run as the `postgres` OS user and the data directory is handed to it;
// every directory above the data directory must then be searchable by that user.
//
// # Embedded Kafka
//
// [StartKafka] runs a kfake cluster (github.com/twmb/franz-go/pkg/kfake) with
// one broker. It speaks the Kafka protocol over real sockets, so any Kafka
// client, kcat included, can talk to it. [StartKafkaProcess] runs the same
// broker as a child process, like PostgreSQL and Redis: the child's main calls
// [ServeKafka], and the broker's allocations and CPU are then its own rather
// than the parent's.
//
// # Binaries
//
// PostgreSQL binaries are found through [PostgresConfig.BinDir], `pg_config
// --bindir`, /usr/lib/postgresql/*/bin (newest first) or PATH; redis-server
// through [RedisConfig.Binary] or PATH. scripts/install-deps.sh installs them
// on Debian and Ubuntu.
package devstack
