package access

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// A grant on a server is what an identity holds, on a project whose items RBAC authorizes,
// when it may use at least one of the server's items: the project's wildcard or the server's
// (of any of the three resources), or one item the server lists. What a server says to the
// whole project rather than to one request (its log lines outside a call, its instructions),
// the level it logs at, and a session of its per-server endpoint are for the identities that
// hold one: an identity granted nothing of a server learns nothing of it that way.

// itemResources are the resources an item is one of.
var itemResources = []string{ResourceTools, ResourcePrompts, ResourceResources}

// GrantedServers reports which servers who holds a grant on: listed names every server to
// decide, each with the items it lists (as RBAC names them; none for a server that lists
// nothing yet). The wildcards of every server are asked first, in one Permit; a server's own
// items only when no wildcard grants it, so an identity granted whole servers costs no review
// per item.
func GrantedServers(ctx context.Context, ia ItemAuthorizer, key types.NamespacedName, who Identity, listed map[string][]Item) map[string]bool {
	granted := make(map[string]bool, len(listed))
	var wildcards []Item
	for server := range listed {
		for _, resource := range itemResources {
			// An unlisted item of no name: only the two wildcards grant it (ResourceNames).
			wildcards = append(wildcards, Item{Resource: resource, Server: server, Unlisted: true})
		}
	}
	for i, ok := range ia.Permit(ctx, who, key, wildcards) {
		if ok {
			granted[wildcards[i].Server] = true
		}
	}
	var items []Item
	for server, its := range listed {
		if !granted[server] {
			items = append(items, its...)
		}
	}
	if len(items) == 0 {
		return granted
	}
	for i, ok := range ia.Permit(ctx, who, key, items) {
		if ok {
			granted[items[i].Server] = true
		}
	}
	return granted
}

// DeniedServer refuses a session of a per-server endpoint to an identity that holds no grant
// on the server.
type DeniedServer struct {
	Project, Server string
}

func (d *DeniedServer) Error() string {
	wildcards := fmt.Sprintf("%q or %q", d.Project+"/*", d.Project+"/"+d.Server+"__*")
	kinds := make([]string, len(itemResources))
	for i, r := range itemResources {
		kinds[i] = r + "." + v1alpha1.GroupVersion.Group
	}
	return fmt.Sprintf("server %q is not allowed for this identity: the project authorizes its items by RBAC, and no Role grants the verb %q on any item of the server (%s named %s, or one of the server's own items)",
		d.Server, ItemVerb, strings.Join(kinds, ", "), wildcards)
}
