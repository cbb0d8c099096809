// Package jsonrpcwire reads and writes JSON-RPC 2.0 messages as bytes: the envelope of a
// request, a notification and a response, their ids, and the members of the objects inside
// them, written by hand; and DecodeExact, which reads them exactly as the SDK does. It is for
// code that passes params and results through as the peer sent them (json.RawMessage), where
// encoding a Go value would decode and encode them again for nothing.
//
// Nothing that writes checks what it is given: params, results and member values must be valid JSON
// already, and an id given as JSON (ResponseTo, ErrorTo) is written as it is.
package jsonrpcwire

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// header begins every message.
const header = `{"jsonrpc":"2.0",`

// Request is a request with a string id and params (a JSON object or array, or nil for none).
func Request(id, method string, params []byte) []byte {
	b := make([]byte, 0, len(header)+len(id)+len(method)+len(params)+32)
	b = append(b, header...)
	b = append(b, `"id":`...)
	b = AppendQuoted(b, id)
	b = append(b, ',')
	return appendCall(b, method, params)
}

// Notification is a notification (a request without an id) with params (nil for none).
func Notification(method string, params []byte) []byte {
	b := make([]byte, 0, len(header)+len(method)+len(params)+24)
	b = append(b, header...)
	return appendCall(b, method, params)
}

func appendCall(b []byte, method string, params []byte) []byte {
	b = append(b, `"method":`...)
	b = AppendQuoted(b, method)
	if params != nil {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}')
}

// ResponseTo answers the request whose id is id (as JSON, as the request carried it): with
// rpcErr when it is not nil, else with result.
func ResponseTo(id, result json.RawMessage, rpcErr *jsonrpc.Error) []byte {
	if rpcErr != nil {
		return errorTo(id, rpcErr)
	}
	b := make([]byte, 0, len(header)+len(id)+len(result)+16)
	b = append(b, header...)
	b = append(b, `"id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	return append(b, '}')
}

// ErrorTo is an error response with code and message to the request whose id is id (as JSON).
func ErrorTo(id json.RawMessage, code int64, message string) []byte {
	return errorTo(id, &jsonrpc.Error{Code: code, Message: message})
}

func errorTo(id json.RawMessage, rpcErr *jsonrpc.Error) []byte {
	e, _ := json.Marshal(rpcErr) // a code, a string and raw data: cannot fail on valid data
	b := make([]byte, 0, len(header)+len(id)+len(e)+16)
	b = append(b, header...)
	b = append(b, `"id":`...)
	b = append(b, id...)
	b = append(b, `,"error":`...)
	b = append(b, e...)
	return append(b, '}')
}

// AppendMember appends `"key":value` to the members of an object being written, after a
// comma unless dst is empty (the first member).
func AppendMember(dst []byte, key string, value json.RawMessage) []byte {
	if len(dst) > 0 {
		dst = append(dst, ',')
	}
	dst = AppendQuoted(dst, key)
	dst = append(dst, ':')
	return append(dst, value...)
}

// AppendQuoted appends s as a JSON string, escaped as encoding/json escapes it (HTML
// characters included, invalid UTF-8 replaced).
func AppendQuoted(dst []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(dst, q...)
}

// StringID reports whether id (as JSON) is the string want.
func StringID(id json.RawMessage, want string) bool {
	var s string
	return json.Unmarshal(id, &s) == nil && s == want
}
