package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"slices"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/dsh-dev/projectmcp/internal/projection"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// hintsOf is what a server's spec says of its tools, in the projection's terms.
func hintsOf(st registry.ServerState) projection.Hints {
	return projection.SpecHints(st.AlwaysLoad(), st.ToolHints())
}

// withEdit is a tool's raw form (as its server listed it) with the edit the projection makes
// to its typed form, so that the raw item and the typed one agree. nil (the typed item is
// served) when the server's members cannot be edited.
func withEdit(raw *conn.RawItem, e projection.Edit) *conn.RawItem {
	if raw == nil || e.Empty() {
		return raw
	}
	members, err := editMembers(raw.Members, e)
	if err != nil {
		return nil
	}
	return &conn.RawItem{Members: members, Newest: raw.Newest}
}

// editMembers makes the edit to a tool's members, keys in sorted order so that the same
// edit always gives the same bytes.
func editMembers(members []byte, e projection.Edit) ([]byte, error) {
	var err error
	for _, k := range slices.Sorted(maps.Keys(e.Meta)) {
		if members, err = setNested(members, "_meta", k, e.Meta[k]); err != nil {
			return nil, err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.Annotations)) {
		if members, err = setNested(members, "annotations", k, e.Annotations[k]); err != nil {
			return nil, err
		}
	}
	if e.Description != nil {
		v, _ := json.Marshal(*e.Description) // a string always encodes
		return setTop(members, "description", v)
	}
	return members, nil
}

// setTop sets key to value among an object's members (written without the braces): in its
// place when the key is there, last when not. The other members keep their order and bytes.
func setTop(members []byte, key string, value json.RawMessage) ([]byte, error) {
	var out []byte
	found := false
	err := eachMember(members, func(k string, v json.RawMessage) error {
		if k == key {
			found, v = true, value
		}
		out = jsonrpcwire.AppendMember(out, k, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !found {
		out = jsonrpcwire.AppendMember(out, key, value)
	}
	return out, nil
}

// setNested sets key to value in the object outer among an object's members (written without
// the braces), adding outer when there is none and replacing one that is not an object. The
// other members keep their order and their values' bytes.
func setNested(members []byte, outer, key string, value json.RawMessage) ([]byte, error) {
	var out []byte
	found := false
	err := eachMember(members, func(k string, v json.RawMessage) error {
		if k == outer {
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
		obj := append(append([]byte{'{'}, jsonrpcwire.AppendMember(nil, key, value)...), '}')
		out = jsonrpcwire.AppendMember(out, outer, obj)
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
