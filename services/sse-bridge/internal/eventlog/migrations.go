package eventlog

import (
	"embed"

	"github.com/ferryhq/ferry/platform/pgstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrations are the sse-bridge schema migrations; `ferry migrate` applies
// them. The log keeps nothing in Postgres any more: the latest migration
// drops the tables of the former Postgres log.
var Migrations = pgstore.Register("sse-bridge", migrations, "migrations")
