package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
)

// # A job's payload limit, everywhere a payload enters the log
//
// A payload is bounded by its tenant's max_payload_bytes (the tenant's
// settings, changed through /v1/admin/tenants) or, for a tenant without
// one, by the deployment's FERRY_API_MAX_PAYLOAD_BYTES: [PayloadLimit]. The
// bound counts the payload as the job's enqueued event carries it (compact
// JSON, '<', '>' and '&' escaped as 6 bytes each), and the same check
// ([encodePayload]) answers the same way wherever a payload comes in:
//
//   - a submission, single or in a batch, a schedule's job template and
//     each of its fires: [Validate];
//   - a re-drive of a dead job whose payload the operator edits:
//     [CheckRedriveEdit], under the tenant's limit as the dlq service
//     reads it ([LimitsReader], the same settings the api reads);
//
// both with 413 payload_too_large over the limit and 422
// payload_unstorable for a value Postgres jsonb cannot store. A re-drive
// that keeps the payload re-sends what was accepted once and is not
// checked again, so a tenant whose limit was lowered meanwhile can still
// re-drive its dead jobs as they were; retries carry the payload unchanged.

// PayloadLimit is the payload limit of a tenant with settings st: its own
// max_payload_bytes when set, else the deployment's.
func PayloadLimit(st auth.Settings, deployment int) int {
	if st.MaxPayloadBytes > 0 {
		return st.MaxPayloadBytes
	}
	return deployment
}

// payloadProblem is what is wrong with a payload: the field (payload, or
// the path of a value Postgres cannot store), the message and the specific
// error code ("" for validation_failed).
type payloadProblem struct {
	field, message, code string
	tooLarge             bool
}

// encodePayload returns raw as the job's event will carry it, or what is
// wrong with it under limit (0: no limit). An absent or JSON null payload
// is no payload (nil).
func encodePayload(raw json.RawMessage, limit int) (json.RawMessage, *payloadProblem) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	enc, err := schema.EncodePayload(raw)
	var ue *schema.UnstorableJSONError
	switch {
	case errors.As(err, &ue):
		return nil, &payloadProblem{field: "payload" + ue.Path, message: ue.Reason + ", which Postgres jsonb cannot store", code: CodePayloadUnstorable}
	case err != nil:
		return nil, &payloadProblem{field: "payload", message: "must be JSON"}
	case limit > 0 && len(enc) > limit:
		return nil, &payloadProblem{field: "payload", tooLarge: true, message: fmt.Sprintf(
			"must be at most %d bytes as encoded in the job's event (compact JSON, '<', '>' and '&' escaped as \\u003c, \\u003e, \\u0026); it is %d", limit, len(enc))}
	}
	return enc, nil
}

// CheckRedriveEdit checks an operator's edits of a dead job's submission
// on re-drive under the tenant's limits, as a submission's fields are
// checked: the payload (nil keeps the original, JSON null clears it) and
// the attempt budget (nil keeps it). It returns the payload as it will be
// produced, or *Invalid.
func CheckRedriveEdit(payload json.RawMessage, maxAttempts *int, lim Limits) (json.RawMessage, error) {
	inv := &Invalid{Fields: map[string]string{}}
	enc, p := encodePayload(payload, lim.MaxPayloadBytes)
	switch {
	case p != nil:
		inv.Fields[p.field], inv.TooLarge, inv.Code = p.message, p.tooLarge, p.code
	case payload != nil && enc == nil:
		enc = json.RawMessage("null")
	}
	if maxAttempts != nil && !ValidMaxAttempts(*maxAttempts) {
		inv.Fields["max_attempts"], inv.TooLarge, inv.Code = maxAttemptsRule, false, ""
	}
	if len(inv.Fields) > 0 {
		return nil, inv
	}
	return enc, nil
}
