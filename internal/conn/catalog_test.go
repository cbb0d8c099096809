package conn

import (
	"runtime"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func catalogOf(raw int, names ...string) catalog {
	cat := catalog{rawTools: raw}
	for _, n := range names {
		cat.tools = append(cat.tools, &mcp.Tool{Name: n, InputSchema: map[string]any{"type": "object"}})
	}
	return cat
}

// Equal catalogs (as sessions see them) are one shared copy; any difference, the count of
// tools before filtering included, makes another; one nothing holds any more is dropped.
func TestInternSharesEqualCatalogs(t *testing.T) {
	a := intern(catalogOf(2, "intern-echo", "intern-sleep"))
	b := intern(catalogOf(2, "intern-echo", "intern-sleep"))
	if a != b {
		t.Fatal("equal catalogs must be interned as one")
	}
	if !a.same(Snapshot{catalog: b}) {
		t.Fatal("a snapshot showing an equal catalog is the same")
	}
	// The same typed tools, but listed with a field the SDK's types do not model, or by a
	// server of the other revision: sessions see them differently (gateway/lists.go).
	withRaw := func(members string, newest bool) catalog {
		cat := catalogOf(2, "intern-echo", "intern-sleep")
		cat.raw[KindTool] = map[string]*RawItem{"intern-echo": {Members: []byte(members), Newest: newest}}
		return cat
	}
	if x1 := intern(withRaw(`"x":1`, false)); x1 != intern(withRaw(`"x":1`, false)) {
		t.Fatal("equal raw items must be interned as one")
	} else if x1 == intern(withRaw(`"x":2`, false)) || x1 == intern(withRaw(`"x":1`, true)) {
		t.Fatal("raw items that differ, or differ in revision, must be interned apart")
	}
	for _, other := range []catalog{catalogOf(2, "intern-echo"), catalogOf(3, "intern-echo", "intern-sleep"),
		withRaw(`"x":1`, false), withRaw(`"x":2`, false), withRaw(`"x":1`, true)} {
		if intern(other) == a {
			t.Fatalf("a different catalog was interned as %v", a.tools)
		}
	}
	digest := a.digest // a and b are not read again: nothing holds the catalog from here on
	deadline := time.Now().Add(10 * time.Second)
	for interned(digest) {
		if time.Now().After(deadline) {
			t.Fatal("a catalog nothing holds stays interned")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
