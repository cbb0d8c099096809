package jsonrpcwire

import (
	"bytes"
	"errors"
	"fmt"

	segjson "github.com/segmentio/encoding/json"
)

// What a message's bytes decode to: the gateway and a connection read every envelope and list
// page they forward with DecodeExact, so that both read JSON exactly as the SDK would.

// maxDepth is how deep the SDK's decoder lets JSON nest (its internal/json): an answer nested
// deeper fails, here as there, before anything else is read of it.
const maxDepth = 1000

// DecodeExact decodes as the SDK does: object keys match struct fields exactly (the standard
// library would also take "NAME" for "name"), and JSON nested deeper than maxDepth is refused
// before the decoder, which recurses per level (a body of brackets alone would overflow the
// stack, which no recover catches).
func DecodeExact(data []byte, v any) error {
	if tooDeep(data) {
		return fmt.Errorf("JSON nested deeper than %d levels", maxDepth)
	}
	return ParseExact(data, v)
}

// ParseExact is DecodeExact for a part of a document DecodeExact has checked (its depth).
func ParseExact(data []byte, v any) error {
	rest, err := segjson.Parse(data, v, segjson.DontMatchCaseInsensitiveStructFields)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return errors.New("data after the JSON value")
	}
	return nil
}

// tooDeep reports JSON whose objects and arrays nest deeper than maxDepth.
func tooDeep(data []byte) bool {
	if bytes.Count(data, []byte("{"))+bytes.Count(data, []byte("[")) <= maxDepth {
		return false // the common case, counted fast: too few brackets to nest deeper
	}
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > maxDepth {
				return true
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return false
}
