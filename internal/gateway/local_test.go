package gateway

import (
	"net/http"
	"os"

	"github.com/dsh-dev/projectmcp/internal/peer"
)

// ownLoopback is r as a loopback caller of the controller's own user, as the gateway's server
// would say of one: a request made in a test comes by no connection, and local mode refuses a
// caller whose user it cannot name.
func ownLoopback(r *http.Request) *http.Request {
	r.RemoteAddr = "127.0.0.1:1234"
	return r.WithContext(peer.WithUID(r.Context(), os.Getuid(), true))
}
