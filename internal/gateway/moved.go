package gateway

import (
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
)

// A request for a project this replica has stopped serving: the project's bucket went to
// another replica (a handoff) after the Router in front of the gateway sent the request here.
// While nothing of the request has reached a server or the session, it is answered "moved":
// a 503 marked buckets.HeaderMoved, which the Router drops, sending the request on to the
// bucket's next holder. So a call that lands in the middle of a handoff is served by the next
// replica rather than failed (paths.ErrMoved). Once anything of it was sent, it is answered as
// usual.

// claim reports whether this replica serves the project now, and the epoch of its claim
// (the bucket Lease's); every project is served, at epoch 0, without Options.Serving.
func (g *Gateway) claim(key types.NamespacedName) (epoch int64, ok bool) {
	if g.opts.Serving == nil {
		return 0, true
	}
	return g.opts.Serving(key)
}

// moved reports whether this replica has stopped serving the project.
func (g *Gateway) moved(key types.NamespacedName) bool {
	_, ok := g.claim(key)
	return !ok
}

// movedAway answers a request this replica did nothing with because the project moved.
func movedAway(w http.ResponseWriter, key types.NamespacedName) {
	w.Header().Set(buckets.HeaderMoved, "1")
	paths.Refuse(w, fmt.Sprintf("ProjectMCP %s is moving to another replica; retry", key), http.StatusServiceUnavailable)
}
