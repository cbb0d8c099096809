package gateway

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
)

// The projection itself is tested in internal/projection; these are what the gateway adds.

// A schema the server library would panic on is refused by addTool, not by a crash.
func TestAddToolRecovers(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	if err := addTool(s, &mcp.Tool{Name: "x"}, nil); err == nil {
		t.Fatal("a nil schema must be an error")
	}
}

// An item whose typed form is unchanged but whose raw form (a field only the server's JSON
// has) changed is replaced, so sessions get list_changed for it; an item unchanged both ways is
// left alone, whatever pointer the new projection gives it.
func TestApplySetSeesRawChanges(t *testing.T) {
	type item struct {
		typed   *mcp.Tool
		members string
	}
	p := &project{g: &Gateway{}}
	have := map[string]projected{}
	var removed, added []string
	apply := func(want map[string]item) {
		removed, added = nil, nil
		applySet(p, "tool", have, want, func(it item) (projected, any) {
			return projected{server: "s", raw: it.typed.Name, item: it.typed, members: &conn.RawItem{Members: []byte(it.members)}}, it.typed
		}, func(names ...string) { removed = append(removed, names...) }, func(name string, _ item) error {
			added = append(added, name)
			return nil
		})
	}
	tool := func() *mcp.Tool { return &mcp.Tool{Name: "t", InputSchema: map[string]any{"type": "object"}} }
	apply(map[string]item{"s__t": {tool(), `"execution":{"taskSupport":"optional"}`}})
	if len(added) != 1 {
		t.Fatalf("added %v", added)
	}
	apply(map[string]item{"s__t": {tool(), `"execution":{"taskSupport":"optional"}`}})
	if len(added)+len(removed) != 0 {
		t.Fatalf("an unchanged item was replaced: removed %v, added %v", removed, added)
	}
	apply(map[string]item{"s__t": {tool(), `"execution":{"taskSupport":"required"}`}})
	if len(removed) != 1 || len(added) != 1 {
		t.Fatalf("a change only the raw item shows: removed %v, added %v", removed, added)
	}
}
