package schema

import (
	"embed"
	"strings"
)

// schemaFS holds one JSON Schema (draft 2020-12) per record type, named
// after its CloudEvents type: schemas/ferry.job.completed.v1.json, …
//
//go:embed schemas/*.json
var schemaFS embed.FS

// JSONSchema returns the JSON Schema (draft 2020-12) of the data of the
// records of CloudEvents type ceType (e.g. "ferry.job.completed.v1" or
// "ferry.worker.status.v1"), and false if the type is unknown. The schema
// describes the record value; the attributes travel as ce_* headers. The
// caller owns the returned bytes.
func JSONSchema(ceType string) ([]byte, bool) {
	if ceType == "" || strings.ContainsAny(ceType, `/\`) {
		return nil, false
	}
	b, err := schemaFS.ReadFile("schemas/" + ceType + ".json")
	if err != nil {
		return nil, false
	}
	return b, true
}
