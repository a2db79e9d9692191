package jobs

import (
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ferryhq/ferry/events/schema"
)

// idPrefix starts every job id.
const idPrefix = "job_"

// NewID mints the id of a new job: job_ + a UUIDv7, so ids sort by the
// time they were minted. Submissions and re-drives use it.
func NewID() string { return idPrefix + schema.NewEventID() }

// DerivedID is the id of the job that key makes at at: a UUIDv7 whose time
// is at and whose other bits hash key, so ids keep their order and the same
// key and time (a schedule's fire, repeated) make the same job.
func DerivedID(key string, at time.Time) string {
	sum := sha256.Sum256([]byte(key))
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(u[:6], ms[2:])
	copy(u[6:], sum[:10])
	u[6] = u[6]&0x0f | 0x70 // version 7
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return idPrefix + u.String()
}

// MintedBefore reports whether the job id was minted (or derived for a
// time) before t; true when the id carries no time.
func MintedBefore(id string, t time.Time) bool {
	u, err := uuid.Parse(strings.TrimPrefix(id, idPrefix))
	if err != nil || u.Version() != 7 {
		return true
	}
	sec, nsec := u.Time().UnixTime()
	return time.Unix(sec, nsec).Before(t)
}
