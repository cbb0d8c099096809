package access

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// An identity granted one tool of a server holds a grant on that server and on no other,
// whatever the others list; the wildcards are asked once for every server, and only the items
// of servers no wildcard grants.
func TestGrantedServers(t *testing.T) {
	var down atomic.Bool
	cs, reviews := itemAPIServer(t, &down) // grants tools p/a__echo alone
	a := &KubernetesAuth{Client: cs}
	listed := map[string][]Item{
		"a": {{Resource: ResourceTools, Server: "a", Name: "fail"}, {Resource: ResourceTools, Server: "a", Name: "echo"}},
		"b": {{Resource: ResourcePrompts, Server: "b", Name: "greet"}, {Resource: ResourceResources, Server: "b", Name: "fixture://b/readme"}},
		"c": nil, // lists nothing (yet): its wildcards alone
	}
	got := GrantedServers(context.Background(), a, types.NamespacedName{Namespace: "ns", Name: "p"}, Identity{token: "good"}, listed)
	if len(got) != 1 || !got["a"] {
		t.Fatalf("granted %v, want a alone", got)
	}
	// p/* of the three resources, each server's wildcard of the three, then the four items.
	if n := reviews.Load(); n != 3+3*3+4 {
		t.Fatalf("%d reviews, want %d", n, 3+3*3+4)
	}
	if got := GrantedServers(context.Background(), a, types.NamespacedName{Namespace: "ns", Name: "p"}, Identity{}, listed); len(got) != 0 {
		t.Fatalf("no token: granted %v, want nothing", got)
	}
}

// A refused session names what would grant the server, in the words a Role is written in.
func TestDeniedServerSaysWhatGrants(t *testing.T) {
	msg := (&DeniedServer{Project: "shop", Server: "db"}).Error()
	for _, want := range []string{`server "db"`, `"call"`, "tools.mcp.dsh.dev", "prompts.mcp.dsh.dev", "resources.mcp.dsh.dev", `"shop/db__*"`, `"shop/*"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %s", msg, want)
		}
	}
}
