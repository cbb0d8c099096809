package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestParseExcept(t *testing.T) {
	for _, tc := range []struct {
		raw, canon string
		set        []string
		bad        bool
	}{
		{raw: "", canon: ""},
		{raw: ",,", canon: ""},
		{raw: "a", canon: "a", set: []string{"a"}},
		{raw: "b,a,b", canon: "a,b", set: []string{"a", "b"}},
		{raw: "memory,git-hub_2", canon: "git-hub_2,memory", set: []string{"git-hub_2", "memory"}},
		{raw: "a,../b", bad: true},
		{raw: "a b", bad: true},
	} {
		canon, set, err := parseExcept(tc.raw)
		if (err != nil) != tc.bad {
			t.Errorf("parseExcept(%q): error %v, want error %v", tc.raw, err, tc.bad)
			continue
		}
		if got := slices.Sorted(maps.Keys(set)); canon != tc.canon || !slices.Equal(got, tc.set) {
			t.Errorf("parseExcept(%q) = %q %v, want %q %v", tc.raw, canon, got, tc.canon, tc.set)
		}
	}
}

// A project keeps at most maxRests except-endpoints: past that, one without sessions gives
// way to a new list, and when each has a session a new list is refused (503), so that callers
// naming list after list cannot make the gateway hold an MCP server for each.
func TestRestsBounded(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	g := New(Options{Registry: reg})
	defer g.shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "bounded"}
	reg.SetDesired(key, registry.Desired{Servers: []string{"a"}})
	p := g.project(key)
	except := func(i int) string { return Path(key) + "?" + ExceptParam + "=" + fmt.Sprint("s", i) }

	for i := range maxRests {
		if v := g.rest(p, fmt.Sprint("s", i), map[string]bool{fmt.Sprint("s", i): true}); v == nil {
			t.Fatalf("except-endpoint %d refused", i)
		}
	}
	if code, body := initialize(g, except(maxRests)); code != http.StatusOK {
		t.Fatalf("a new list past the bound, with endpoints without sessions: %d %s", code, body)
	}
	if n := rests(g, p); n != maxRests {
		t.Fatalf("the project keeps %d except-endpoints, want %d", n, maxRests)
	}
	g.mu.Lock()
	kept := slices.Collect(maps.Keys(p.rests))
	g.mu.Unlock()
	for _, canon := range kept { // a session on each kept endpoint
		if code, body := initialize(g, Path(key)+"?"+ExceptParam+"="+canon); code != http.StatusOK {
			t.Fatalf("except-endpoint %s: %d %s", canon, code, body)
		}
	}
	code, body := initialize(g, except(2*maxRests))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "each with sessions") {
		t.Fatalf("a new list when every endpoint has a session: %d %s, want 503", code, body)
	}
	if code, _ := initialize(g, Path(key)+"?"+ExceptParam+"=a/b"); code != http.StatusBadRequest {
		t.Fatalf("a list naming no server name: %d, want 400", code)
	}
}

func rests(g *Gateway, p *project) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(p.rests)
}
