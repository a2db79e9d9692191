package store

import (
	"embed"

	"github.com/ferryhq/ferry/platform/pgstore"
)

//go:embed migrations_indexes/*.sql
var indexMigrations embed.FS

// IndexMigrations change only the audit tables' indexes (which index
// serves which query is in the files); a component of its own, applied
// after Migrations, so its numbering never collides with theirs.
var IndexMigrations = pgstore.Register("audit-indexes", indexMigrations, "migrations_indexes")
