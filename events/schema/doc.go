// Package schema is Ferry's wire contract: the topics, the CloudEvents 1.0
// envelope carried in Kafka binary mode, and the Go types of every lifecycle
// event and command.
//
// # Envelope
//
// Every record's value is the event's JSON data. Its attributes travel as
// record headers: ce_specversion, ce_id (a UUIDv7), ce_source, ce_type
// (ferry.job.<name>.v1), ce_time, ce_subject (the job id), ce_tenant,
// content-type and the W3C traceparent. The record key is the job id, so all
// events of one job land on the same partition of each topic.
//
// # Ordering
//
// Events of one job arrive on different topics, so consumers must not rely on
// cross-topic order. [Position] and [Position.Advances] give every projection
// the same rule for deciding whether an event moves a job forward.
//
// # Decoding
//
// Every service decodes every record it consumes, so [Decode] is on the
// hottest path there is. It reads the headers in place (no copy per lookup)
// and decodes the job events' payloads with a hand-written reader of the
// shape json.Marshal writes; anything outside that shape (an unknown or
// differently cased key, a repeated key, null, an escape in a key or time)
// is decoded by encoding/json instead. Both give the same event, and
// invalid input gets encoding/json's error: FuzzFastDecodeMatchesJSON holds
// the two together.
//
// # Encoding
//
// Every producer encodes every record it sends with [NewRecord]. It writes
// the payloads of an attempt's path (enqueued, dispatch, started, progress,
// completed, failed) with a hand-written encoder that gives exactly the
// bytes json.Marshal gives, and anything else (another type, a value
// json.Marshal refuses) with encoding/json: FuzzFastEncodeMatchesJSON holds
// the two together. The record's key and header values share one buffer.
//
// # Compatibility
//
// The JSON Schemas under schemas/ and the golden files under testdata/ are
// checked by tests: removing or renaming a field or changing its type fails
// the build. Add optional fields freely; anything else needs a new version
// (ferry.job.<name>.v2).
package schema
