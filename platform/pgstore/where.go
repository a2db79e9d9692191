package pgstore

import (
	"strconv"
	"strings"
)

// Where builds the WHERE clause of a query whose filters are optional:
// each condition names its values through Arg, which numbers them ($1, $2,
// …) in the order they are added, so the placeholders and Args always
// agree.
type Where struct {
	Conds []string
	Args  []any
}

// Arg adds v as the next parameter and returns its placeholder.
func (w *Where) Arg(v any) string {
	w.Args = append(w.Args, v)
	return "$" + strconv.Itoa(len(w.Args))
}

// SQL is the conditions joined with AND.
func (w *Where) SQL() string { return strings.Join(w.Conds, " AND ") }
