package jobs

import (
	"fmt"
	"net/http"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/httpx"
)

// maxAttemptsRule is what a bad attempt budget is told.
var maxAttemptsRule = fmt.Sprintf("must be between 1 and %d", MaxMaxAttempts)

// CheckIdempotencyKey returns what is wrong with an Idempotency-Key (the
// header or a batch item's idempotency_key), or "": it is stored in the
// status projection, so it must be storable text of bounded length.
func CheckIdempotencyKey(key string) string {
	if err := schema.CheckText(key); err != nil {
		return schema.FieldMessage(err)
	}
	if len(key) > MaxIdempotencyKey {
		return fmt.Sprintf("must be at most %d characters", MaxIdempotencyKey)
	}
	return ""
}

// HTTPError is the answer to a rejected submission or re-drive edit: 413
// payload_too_large when the payload's size is all that is wrong, else 422
// with the fields' specific code when they share one (payload_unstorable,
// run_at_too_far), or validation_failed.
func (e *Invalid) HTTPError() *httpx.Error {
	if e.TooLarge {
		he := httpx.Errorf(http.StatusRequestEntityTooLarge, "payload_too_large", "%s", "payload "+e.Fields["payload"])
		he.Fields = e.Fields
		return he
	}
	he := httpx.Errorf(http.StatusUnprocessableEntity, "validation_failed", "the job has invalid fields")
	switch e.Code {
	case CodePayloadUnstorable:
		he.Code, he.Message = e.Code, "the payload holds a value Postgres cannot store (see fields); nothing was queued"
	case CodeRunAtTooFar:
		he.Code, he.Message = e.Code, "the job would start later than this deployment can keep it (see fields)"
	}
	he.Fields = e.Fields
	return he
}
