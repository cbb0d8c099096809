package gateway

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// ExceptParam is the query parameter of the project endpoint that names servers it leaves out:
// /projects/<namespace>/<name>/mcp?except=a,b serves every other server of the project, under
// projected names. connect writes such an entry beside the per-server ones, naming the servers
// that have an entry of their own, so that a server added to the config later is offered at
// once (its tools arrive by list_changed) without the agent's file being written again.
const ExceptParam = v1alpha1.ExceptParam

// maxRests bounds the except-endpoints one project keeps: each is an MCP server with its own
// sessions and catalog, and any caller may name a new set. Past it, one without sessions gives
// way; when every one has sessions, the request is refused.
const maxRests = 16

var serverName = regexp.MustCompile(v1alpha1.ServerNamePattern)

// parseExcept is the canonical form of an except parameter's list (sorted, without
// duplicates, joined by commas) and the set it names; "" for an empty list. A name no server
// can have is an error naming it.
func parseExcept(raw string) (string, map[string]bool, error) {
	set := map[string]bool{}
	for name := range strings.SplitSeq(raw, ",") {
		if name == "" {
			continue
		}
		if !serverName.MatchString(name) {
			return "", nil, fmt.Errorf("%s names %q, which is not a server name (%s)", ExceptParam, name, v1alpha1.ServerNamePattern)
		}
		set[name] = true
	}
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ","), set, nil
}

// exceptOf is the request's except list as it stands in the query, and whether there is one.
// The common request has no query at all, and costs no parse.
func exceptOf(r *http.Request) (string, bool) {
	if r.URL.RawQuery == "" {
		return "", false
	}
	q := r.URL.Query()
	if !q.Has(ExceptParam) {
		return "", false
	}
	return strings.Join(q[ExceptParam], ","), true
}

// restOf routes a request of the project endpoint that names servers to leave out to the
// endpoint serving the rest; p itself when the list is empty. It answers the request (and
// returns nil) when the list names no server name, or when the project keeps maxRests such
// endpoints, each with sessions.
func (g *Gateway) restOf(w http.ResponseWriter, r *http.Request, p *project) *project {
	raw, ok := exceptOf(r)
	if !ok {
		return p
	}
	canon, set, err := parseExcept(raw)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil
	case canon == "":
		return p
	}
	v := g.rest(p, canon, set)
	if v == nil {
		http.Error(w, fmt.Sprintf("ProjectMCP %s serves %d endpoints with %s already, each with sessions; retry later", p.key, maxRests, ExceptParam),
			http.StatusServiceUnavailable)
	}
	return v
}

// rest returns the endpoint of a project that serves its servers but those of set (canon is
// its canonical form), creating it; nil when there are maxRests already, each with sessions,
// or the gateway is closing.
func (g *Gateway) rest(p *project, canon string, set map[string]bool) *project {
	g.mu.Lock()
	v := p.rests[canon]
	var evicted *project
	created := false
	if v == nil && !g.closed {
		if len(p.rests) >= maxRests {
			evicted = g.idleRestLocked(p)
		}
		if len(p.rests) < maxRests {
			v = p.newView("")
			v.except = set
			p.rests[canon] = v
			created = true
		}
	}
	g.mu.Unlock()
	if evicted != nil {
		evicted.close()
	}
	if created {
		v.sync()
	}
	if v == nil || v.closed.Load() {
		return nil
	}
	return v
}

// idleRestLocked takes out of p's except-endpoints one that has no session, and returns it to
// be closed; nil when each has one. Callers hold g.mu.
func (g *Gateway) idleRestLocked(p *project) *project {
	for canon, v := range p.rests {
		if stateful, stateless := v.sessions.counts(); stateful+stateless == 0 {
			delete(p.rests, canon)
			return v
		}
	}
	return nil
}

// excepts reports whether the endpoint leaves server out.
func (p *project) excepts(server string) bool {
	return p.except[server]
}
