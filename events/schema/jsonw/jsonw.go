// Package jsonw appends JSON values byte for byte as encoding/json's
// json.Marshal writes them (HTML escaping on), without reflection. It is
// the one home of those rules for Ferry's hand-written encoders: the
// records' payloads (package schema) and the API's job resource (package
// jobs). Their fuzz tests hold each encoder to json.Marshal.
package jsonw

import (
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// HexDigits are the lower-case hexadecimal digits encoding/json escapes
// with.
const HexDigits = "0123456789abcdef"

// htmlSafe reports the ASCII bytes encoding/json writes in a string as
// they are, HTML escaping on (json.Marshal's setting): not a control
// character, ", \, <, > or &.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// String appends s as a JSON string exactly as encoding/json's
// appendString does with HTML escaping: short escapes for \b \f \n \r \t
// " \, \u00XX for other control characters and <, >, &, \u2028 and \u2029
// for the JavaScript line separators, and \ufffd for each byte of invalid
// UTF-8.
func String(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			b = appendEscapedByte(append(b, s[start:i]...), c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', HexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}

// OptString appends the member key (its name, colon and any leading comma,
// as written) with s as a string, unless s is empty: an omitempty string.
func OptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return String(append(b, key...), s)
}

// appendEscapedByte writes the escape of an ASCII byte htmlSafe refuses.
func appendEscapedByte(b []byte, c byte) []byte {
	switch c {
	case '\\', '"':
		return append(b, '\\', c)
	case '\b':
		return append(b, '\\', 'b')
	case '\f':
		return append(b, '\\', 'f')
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', HexDigits[c>>4], HexDigits[c&0xF])
}

// Time appends t as time.Time.MarshalJSON writes it: RFC 3339 with
// nanoseconds, quoted. false for a time MarshalJSON refuses (a year outside
// 0000–9999, a zone offset of a day or more); b is then unchanged.
// AppendText writes the same text and refuses the same times.
func Time(b []byte, t time.Time) ([]byte, bool) {
	out, err := t.AppendText(append(b, '"'))
	if err != nil {
		return b, false
	}
	return append(out, '"'), true
}

// Float appends f as encoding/json's float64 encoder does: like
// strconv.FormatFloat(f, 'g', -1, 64) but with exponents only below 1e-6
// and from 1e21, unpadded. false for NaN and ±Inf, which it refuses.
func Float(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-07 → e-7
		b = b[:n-1]
	}
	return b, true
}

// Raw appends m as encoding/json writes a json.RawMessage member: compacted
// and HTML-escaped (Compact), null when m is nil. false when m is not valid
// JSON (an empty, non-nil m included), which json.Marshal refuses.
func Raw(b []byte, m json.RawMessage) ([]byte, bool) {
	if m == nil {
		return append(b, "null"...), true
	}
	if !json.Valid(m) {
		return b, false
	}
	return Compact(b, m), true
}

// Compact appends the valid JSON src as encoding/json's compact with HTML
// escaping does to a MarshalJSON result: whitespace outside strings
// dropped, <, >, & and U+2028, U+2029 escaped, everything else (invalid
// UTF-8 and escapes included) copied as is.
func Compact(b, src []byte) []byte {
	start, inString := 0, false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if !inString {
			switch c {
			case '"':
				inString = true
			case ' ', '\t', '\n', '\r':
				b = append(b, src[start:i]...)
				start = i + 1
			}
			continue
		}
		switch {
		case c == '"':
			inString = false
		case c == '\\':
			i++ // the escaped character is ASCII in valid JSON: it cannot end the string
		case c == '<' || c == '>' || c == '&':
			b = append(append(b, src[start:i]...), '\\', 'u', '0', '0', HexDigits[c>>4], HexDigits[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
			b = append(append(b, src[start:i]...), '\\', 'u', '2', '0', '2', HexDigits[src[i+2]&0xF])
			i += 2
			start = i + 1
		}
	}
	return append(b, src[start:]...)
}
