package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/dsh-dev/projectmcp/internal/projection"
)

// withAlwaysLoad is a tool's raw form (as its server listed it) with the mark the projection
// gives the tools of a server whose spec says alwaysLoad, so that the raw item and the typed one
// agree. nil (the typed item is served) when the server's members cannot be edited.
func withAlwaysLoad(raw *conn.RawItem) *conn.RawItem {
	if raw == nil {
		return nil
	}
	members, err := setMeta(raw.Members, projection.MetaAlwaysLoad, json.RawMessage("true"))
	if err != nil {
		return nil
	}
	return &conn.RawItem{Members: members, Newest: raw.Newest}
}

// setMeta sets key to value in the _meta object among an object's members (written without
// the braces), adding _meta when there is none and replacing one that is not an object. The
// other members keep their order and their values' bytes.
func setMeta(members []byte, key string, value json.RawMessage) ([]byte, error) {
	var out []byte
	found := false
	err := eachMember(members, func(k string, v json.RawMessage) error {
		if k == "_meta" {
			found = true
			inner, err := setMember(v, key, value)
			if err != nil {
				return err
			}
			v = inner
		}
		out = jsonrpcwire.AppendMember(out, k, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !found {
		meta := append(append([]byte{'{'}, jsonrpcwire.AppendMember(nil, key, value)...), '}')
		out = jsonrpcwire.AppendMember(out, "_meta", meta)
	}
	return out, nil
}

// setMember is the object v with key set to value (last, any earlier member of that key left
// out); v that is not an object becomes one holding key alone.
func setMember(v json.RawMessage, key string, value json.RawMessage) (json.RawMessage, error) {
	var inner []byte
	if t := bytes.TrimSpace(v); len(t) >= 2 && t[0] == '{' {
		if err := eachMember(t[1:len(t)-1], func(k string, v json.RawMessage) error {
			if k != key {
				inner = jsonrpcwire.AppendMember(inner, k, v)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	inner = jsonrpcwire.AppendMember(inner, key, value)
	return append(append([]byte{'{'}, inner...), '}'), nil
}

// eachMember calls f with each member of an object's members (written without the braces),
// in order.
func eachMember(members []byte, f func(key string, value json.RawMessage) error) error {
	dec := json.NewDecoder(bytes.NewReader(append(append([]byte{'{'}, members...), '}')))
	if _, err := dec.Token(); err != nil {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		k, ok := tok.(string)
		if !ok {
			return errors.New("an object key is not a string")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		if err := f(k, v); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) { // members that close the object early
		return errors.New("not an object's members")
	}
	return nil
}
