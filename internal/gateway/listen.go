package gateway

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// A 2026-07-28 session's subscriptions/listen is served here, not by the SDK's stateless
// handler. Through the SDK, an idle listen held four goroutines (net/http's background reader,
// the SDK session's reader, its POST handler waiting for the stream's end, and the SDK server's
// listen handler) and an SDK session's heap; here it holds a listen record and its taken
// connection, whose reader starts only when the client sends something or goes
// (listenconn.go), or on HTTP/2 and TLS the HTTP handler's goroutine.
//
// The stream is what the SDK writes: an SSE "message" event per JSON-RPC message, the first
// notifications/subscriptions/acknowledged with the subset of the notifications the endpoint
// honours (all it is asked for: it declares every list's listChanged and resource
// subscriptions), then the notifications, each with the listen's request id in its _meta
// (mcp.MetaKeySubscriptionID). A listen that asks for nothing the endpoint honours is
// answered at once, as one the endpoint ends (it closes) is: with the SubscriptionsListenResult.
//
// The stream has one writer at a time, never a goroutine serving other sessions (outbox.go):
// what the projection's sync and the connections deliver is queued on the listen's record,
// and the handler's goroutine woken, or once the stream is taken the listen's own writer
// started. A
// request the gateway would answer otherwise than the SDK (a malformed one, a refused mount or
// subscribe) goes to the SDK's handler, which answers it as before.

// Each listen holds a connection (and, on HTTP/2 or TLS, a goroutine) for as long as it
// runs, and outlives its session's release: a session holds at most maxListensPerSession at
// once, and all the sessions of one identity on a project's endpoints together at most as many
// as it may hold sessions (--max-sessions-per-principal). Past either a listen is refused with
// a JSON-RPC error naming the bound.

// maxListensPerSession bounds one session's open listens: a client listens once, and a few
// more cover one re-listening before its old stream is seen to end.
const maxListensPerSession = 4

// listenDelay is how long a list change waits for others before it is announced: the SDK's
// server waits as long (10 ms), so a sync's several changes are one list_changed.
const listenDelay = 10 * time.Millisecond

// listen is one subscriptions/listen stream.
type listen struct {
	id      json.RawMessage // the request's id, as the SDK writes it back
	session string          // the session's ref
	who     access.Identity // who opened it (its principal's share, its access; never shown)
	lists   conn.Lists      // the list_changed it takes
	uris    []string        // the resources whose updates it takes

	mu     sync.Mutex
	queue  []notice // method, uri and meta only: the writer encodes them (send is unused)
	closed bool     // the endpoint is closing: the stream ends with its result
	wake   chan struct{}
	// detached is the stream once its connection was taken from net/http (listenconn.go),
	// whose writer put and close start; nil while the handler's goroutine writes it.
	detached *detachedListen
}

// listeners are an endpoint's listens.
type listeners struct {
	mu      sync.Mutex
	all     map[*listen]struct{}
	byURI   map[string]map[*listen]struct{}
	pending conn.Lists // list changes waiting for listenDelay
	timer   *time.Timer
	closed  bool
}

// serveListen serves a 2026-07-28 subscriptions/listen POST; false when the SDK's handler is to.
func (p *project) serveListen(w http.ResponseWriter, r *http.Request, who access.Identity) bool {
	lr, ok := paths.ReadListen(r, who)
	if !ok {
		return false
	}
	o, id := lr.Origin, lr.Origin.Session()
	if !p.mountListener(r.Context(), o, lr.ClientInfo) {
		return false
	}
	if err := p.sessions.principals.listen(o.Who().Principal, id, maxListensPerSession, p.g.opts.MaxSessionsPerPrincipal); err != nil {
		paths.RefuseListen(w, lr, err.Error())
		return true
	}
	unlisten := sync.OnceFunc(func() { p.sessions.principals.unlisten(o.Who().Principal, id) })
	l := &listen{id: lr.ID, session: id, who: o.Who(), lists: listsOf(lr.Notifications),
		uris: lr.Notifications.ResourceSubscriptions, wake: make(chan struct{}, 1)}
	if !p.listeners.add(l) {
		unlisten()
		return false // the endpoint is closing: the SDK answers
	}
	// The session's idle time counts from the listen's request, as it did through the SDK: a
	// session that only listens is released after StatelessIdle (its stream stays open).
	forget := func() {
		for _, uri := range p.listeners.remove(l) {
			p.subs.drop(id, uri)
		}
		unlisten()
	}
	if !p.subscribeListen(r.Context(), o, l) {
		forget()
		return false
	}
	if !p.streamListen(w, r, l, lr.Notifications, forget) {
		forget() // the stream ended with the handler; a detached one forgets it when it ends
	}
	return true
}

// listsOf is the list_changed a listen asks for.
func listsOf(n mcp.NotificationSubscriptions) conn.Lists {
	var l conn.Lists
	if n.ToolsListChanged {
		l |= conn.ToolList
	}
	if n.PromptsListChanged {
		l |= conn.PromptList
	}
	if n.ResourcesListChanged {
		l |= conn.ResourceList
	}
	return l
}

// mountListener mounts the listen's session as mountMiddleware mounts a stateless one; false
// when the mount refuses it (the SDK's handler then answers the refusal as before).
func (p *project) mountListener(ctx context.Context, o paths.Origin, clientInfo json.RawMessage) bool {
	return p.mountStateless(ctx, o.Session(), o.Who(), func() string { return paths.Bounded(infoName(clientInfo)) }) == nil
}

// infoName is "name/version" of a 2026-07-28 request's clientInfo, as announcedName gives it.
func infoName(raw json.RawMessage) string {
	var info struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if len(raw) == 0 || jsonrpcwire.DecodeExact(raw, &info) != nil {
		return ""
	}
	return info.Name + "/" + info.Version
}

// subscribeListen subscribes the listen's session to its resources (notify.go: subscribe).
// One that fails undoes the listen's others and leaves the listen to the SDK's handler, which
// subscribes again and answers the failure as before.
func (p *project) subscribeListen(ctx context.Context, o paths.Origin, l *listen) bool {
	for i, uri := range l.uris {
		if err := p.subs.subscribeAs(ctx, o, uri); err != nil {
			done := l.uris[:i]
			for _, uri := range p.listeners.remove(l) {
				if slices.Contains(done, uri) {
					p.subs.drop(o.Session(), uri)
				}
			}
			l.uris = nil // nothing for the deferred removal to drop
			return false
		}
	}
	return true
}

// streamListen writes the listen's stream until its client goes or the endpoint closes; true
// when the stream goes on detached from the handler (listenconn.go), which then owns forget.
func (p *project) streamListen(w http.ResponseWriter, r *http.Request, l *listen, agreed mcp.NotificationSubscriptions, forget func()) bool {
	h := w.Header()
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Content-Type", "text/event-stream")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	if !writeEvent(w, l.acknowledged(agreed)) {
		return false
	}
	if l.lists == 0 && len(l.uris) == 0 {
		writeEvent(w, l.result(p.serverInfo))
		return false
	}
	if p.detach(w, r, l, forget) != nil {
		return true
	}
	for {
		select {
		case <-r.Context().Done():
			return false
		case <-l.wake:
		}
		queue, closed := l.take()
		for _, n := range queue {
			if !writeEvent(w, l.encode(n)) {
				return false // the client stopped reading: its stream is broken
			}
		}
		if closed {
			writeEvent(w, l.result(p.serverInfo))
			return false
		}
	}
}

// writeEvent writes one SSE message event and flushes it; false once the stream is broken.
func writeEvent(w http.ResponseWriter, data []byte) bool {
	if _, err := w.Write(eventFrame(data)); err != nil {
		return false
	}
	return http.NewResponseController(w).Flush() == nil
}

// eventFrame is one SSE message event carrying data, as the SDK writes one.
func eventFrame(data []byte) []byte {
	frame := make([]byte, 0, len(data)+24)
	frame = append(frame, "event: message\ndata: "...)
	return append(append(frame, data...), "\n\n"...)
}

// acknowledged is the stream's first message: the notifications the endpoint honours.
func (l *listen) acknowledged(agreed mcp.NotificationSubscriptions) []byte {
	n, _ := json.Marshal(agreed) // bools and strings: cannot fail
	b := append([]byte(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"`+mcp.MetaKeySubscriptionID+`":`), l.id...)
	b = append(append(append(b, `},"notifications":`...), n...), "}}"...)
	return b
}

// result is the listen's response, which ends its stream.
func (l *listen) result(serverInfo json.RawMessage) []byte {
	b := append([]byte(`{"jsonrpc":"2.0","id":`), l.id...)
	b = append(append(b, `,"result":{"resultType":"complete","_meta":{"`+mcp.MetaKeyServerInfo+`":`...), serverInfo...)
	b = append(append(append(b, `,"`+mcp.MetaKeySubscriptionID+`":`...), l.id...), "}}}"...)
	return b
}

// encode is a queued notification as the listen's stream carries it. A resource update keeps
// the _meta its server gave it, as the SDK's server passes it on.
func (l *listen) encode(n notice) []byte {
	if len(n.meta) > 0 {
		meta := maps.Clone(n.meta)
		meta[mcp.MetaKeySubscriptionID] = l.id
		params, err := json.Marshal(&mcp.ResourceUpdatedNotificationParams{Meta: meta, URI: n.uri})
		if err == nil {
			return append(append([]byte(`{"jsonrpc":"2.0","method":"`+n.method+`","params":`), params...), '}')
		}
	}
	b := append([]byte(`{"jsonrpc":"2.0","method":"`+n.method+`","params":{"_meta":{"`+mcp.MetaKeySubscriptionID+`":`), l.id...)
	b = append(b, '}')
	if n.uri != "" {
		uri, _ := json.Marshal(n.uri)
		b = append(append(b, `,"uri":`...), uri...)
	}
	return append(b, "}}"...)
}

// put queues a notification for the listen's writer (coalescing one already waiting) and
// wakes it.
func (l *listen) put(n notice) {
	l.mu.Lock()
	o := outbox{queue: l.queue}
	o.add(n)
	l.queue = o.queue
	l.mu.Unlock()
	l.signal()
}

func (l *listen) signal() {
	l.mu.Lock()
	d := l.detached
	l.mu.Unlock()
	if d != nil {
		d.kick()
		return
	}
	select {
	case l.wake <- struct{}{}:
	default: // woken already
	}
}

// take is what waits for the writer, and whether the endpoint is closing.
func (l *listen) take() ([]notice, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queue
	l.queue = nil
	return q, l.closed
}

// listMethods are the list_changed of each list.
var listMethods = []struct {
	list   conn.Lists
	method string
}{
	{conn.ToolList, "notifications/tools/list_changed"},
	{conn.PromptList, "notifications/prompts/list_changed"},
	{conn.ResourceList, "notifications/resources/list_changed"},
}

// add records a listen; false once the endpoint is closing.
func (t *listeners) add(l *listen) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if t.all == nil {
		t.all, t.byURI = map[*listen]struct{}{}, map[string]map[*listen]struct{}{}
	}
	t.all[l] = struct{}{}
	for _, uri := range l.uris {
		if t.byURI[uri] == nil {
			t.byURI[uri] = map[*listen]struct{}{}
		}
		t.byURI[uri][l] = struct{}{}
	}
	return true
}

// remove forgets a listen that has ended, and returns the URIs no other listen of its session
// takes: the session's subscriptions to them go.
func (t *listeners) remove(l *listen) (gone []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.all, l)
	for _, uri := range l.uris {
		if t.lastOfLocked(l, uri) {
			gone = append(gone, uri)
		}
		delete(t.byURI[uri], l)
		if len(t.byURI[uri]) == 0 {
			delete(t.byURI, uri)
		}
	}
	return gone
}

func (t *listeners) lastOfLocked(l *listen, uri string) bool {
	for other := range t.byURI[uri] {
		if other != l && other.session == l.session {
			return false
		}
	}
	return true
}

// changed announces list changes to the listens that take them, once listenDelay has passed
// without another change (as the SDK's server does). The timer's goroutine only queues.
func (t *listeners) changed(lists conn.Lists) {
	if lists == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.all) == 0 {
		return // no listen to tell: a change before one starts is in its first list
	}
	t.pending |= lists
	if t.timer == nil {
		t.timer = time.AfterFunc(listenDelay, t.announce)
	} else {
		t.timer.Reset(listenDelay)
	}
}

// announce queues the pending list changes on every listen that takes them.
func (t *listeners) announce() {
	t.mu.Lock()
	lists := t.pending
	t.pending = 0
	all := make([]*listen, 0, len(t.all))
	for l := range t.all {
		all = append(all, l)
	}
	t.mu.Unlock()
	for _, l := range all {
		for _, m := range listMethods {
			if lists&l.lists&m.list != 0 {
				l.put(notice{method: m.method})
			}
		}
	}
}

// updated queues a resource's update on the listens that take it (only: when set, those of
// the sessions it admits alone).
func (t *listeners) updated(u *mcp.ResourceUpdatedNotificationParams, only func(ref string) bool) {
	t.mu.Lock()
	ls := maps.Clone(t.byURI[u.URI])
	t.mu.Unlock()
	for l := range ls {
		if only != nil && !only(l.session) {
			continue // another connection's update
		}
		l.put(notice{method: "notifications/resources/updated", uri: u.URI, meta: u.Meta})
	}
}

// close ends every listen, each with its result, and refuses new ones.
func (t *listeners) close() {
	t.mu.Lock()
	t.closed = true
	all := maps.Clone(t.all)
	t.mu.Unlock()
	for l := range all {
		l.end()
	}
}

// endWhere ends the listens over (decided outside t.mu), each with its result.
func (t *listeners) endWhere(over func(*listen) bool) {
	t.mu.Lock()
	all := maps.Clone(t.all)
	t.mu.Unlock()
	for l := range all {
		if over(l) {
			l.end()
		}
	}
}

// end has the listen's writer write its result, which ends its stream.
func (l *listen) end() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.signal()
}

// count is the number of open listens (tests).
// holders are the identities of the listens open now.
func (t *listeners) holders() []access.Identity {
	t.mu.Lock()
	defer t.mu.Unlock()
	who := make([]access.Identity, 0, len(t.all))
	for l := range t.all {
		who = append(who, l.who)
	}
	return who
}

func (t *listeners) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.all)
}
