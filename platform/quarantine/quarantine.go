// Package quarantine keeps one record from stopping a consumer for everyone.
//
// Ferry's consumers (every platform/projection and the scheduler's consume
// loop) apply records in polled batches and, before this package, retried a
// failing batch forever: one record Postgres rejects (a NUL byte in a jsonb
// string) or Kafka refuses (a decision record over the maximum message size)
// stopped every tenant's status, streams or dispatch.
//
// A [Settler] applies a batch. A failure is classified:
//
//   - transient (the default: connection loss, context errors, Postgres or
//     Redis unavailable, any error not listed below): the same batch is
//     retried with backoff, forever. A record is never parked because a
//     dependency was down.
//   - poison ([IsPoison]): an error that the same input deterministically
//     produces again: a Postgres error of SQLSTATE class 22 (data exception,
//     e.g. 22021 invalid byte sequence, 22P05 unsupported Unicode escape),
//     23 (integrity constraint violation) or 54 (program limit exceeded,
//     e.g. an index row too large); a Kafka MESSAGE_TOO_LARGE,
//     RECORD_LIST_TOO_LARGE or INVALID_RECORD; or an error the consumer
//     marked with [Poison] (decode and validation errors).
//
// A batch that fails with poison [MaxTries] times is bisected: its first
// half is settled, then its second half (each half tried once before it is
// split again), so records of one partition are applied in order and every
// applied part stores its offsets with it. A single record that still fails
// with poison MaxTries times is parked: a row in ferry_quarantine (topic,
// partition, offset, key, value, headers, error, first/last seen, tries)
// written together with the offsets past it, and processing moves on.
//
// Parked rows stay until an operator acts (the api's /v1/admin/quarantine
// routes): retry marks the row, and the owning consumer's [Watch] loop
// re-applies it within a few seconds (resolved on success, parked again
// with the new error on failure); discard marks it discarded with who and
// when. Nothing is deleted. The gauge ferry_quarantined_records{group,status}
// and the counter ferry_quarantine_parked_total show them.
package quarantine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
)

// MaxTries is how many times a batch, and then a single record, must fail
// with poison before the batch is bisected and the record parked: a
// poison-class error that does not repeat (a rare race on a unique index)
// costs a retry, not a parked record.
const MaxTries = 3

// poisonError marks an error as deterministic for its input.
type poisonError struct{ err error }

func (p *poisonError) Error() string { return p.err.Error() }
func (p *poisonError) Unwrap() error { return p.err }

// Poison marks err as caused by the record itself (it cannot decode, fails
// validation): applying the same record again fails again, so after
// MaxTries the record is parked instead of retried forever. Poison(nil) is
// nil.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	return &poisonError{err: err}
}

// poisonSQLStates are the SQLSTATE classes an input, not the database's
// state, causes. Classes left out on purpose: 08 (connection), 40
// (serialization, deadlock), 53 (insufficient resources), 57 (operator
// intervention), 58 (system) are transient; 42 (undefined table, syntax)
// is a deployment bug that would otherwise park every record.
var poisonSQLStates = map[string]bool{"22": true, "23": true, "54": true}

// poisonKafka are the produce errors a retry of the same record repeats.
// Authorization and topic errors are left out: a misconfiguration must not
// park every record.
var poisonKafka = []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord}

// IsPoison says whether err is deterministic for the records that caused
// it (see the package documentation); anything else is retried forever.
// Context errors are never poison, even when wrapped in a poison class.
func IsPoison(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var p *poisonError
	if errors.As(err, &p) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return len(pg.Code) == 5 && poisonSQLStates[pg.Code[:2]]
	}
	for _, k := range poisonKafka {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}
