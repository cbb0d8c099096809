package gateway

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
)

// Listens is how many listens g serves itself for project key (the endpoint tests): a taken
// stream's, or one its handler's goroutine writes (listenconn.go); not the SDK handler's.
func Listens(g *Gateway, key types.NamespacedName) int {
	g.mu.Lock()
	p := g.projects[key]
	g.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.listeners.count()
}

// KeptReplays is what g's kept call streams hold now, every project's together (the endpoint
// tests).
func KeptReplays(g *Gateway) paths.ReplayUsage { return g.replays.Usage() }
