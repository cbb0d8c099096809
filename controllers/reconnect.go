package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// handledReconnects remembers, per project, the reconnect token this process carried out last.
//
// Status records the handled token too (lastHandledReconnectAt), but only once a status write
// succeeds, and that write comes after the rebuild. Were status the only record, a write that
// failed (or a reconcile that read the object before the write reached the cache) would show
// the token unhandled, and every retry would rebuild the servers again, killing the healthy
// connections it had just built. The memory is written as soon as a request is carried out and
// is asked first; status is written from it until a write lands. After a restart the memory is
// empty and status is the record (a new process builds every connection anyway).
type handledReconnects struct {
	mu sync.Mutex
	m  map[types.NamespacedName]handledToken
}

// handledToken is the token carried out for one incarnation of a project: one deleted and
// created again under the same name has a new UID, and starts from its own status.
type handledToken struct {
	uid   types.UID
	token string
}

// handled is the reconnect token carried out last for obj: the one remembered, else the one
// status records.
func (h *handledReconnects) handled(obj *v1alpha1.ProjectMCP) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.m[client.ObjectKeyFromObject(obj)]; ok && t.uid == obj.UID {
		return t.token
	}
	return obj.Status.LastHandledReconnectAt
}

// carriedOut records that obj's reconnect request was carried out, and returns its token.
func (h *handledReconnects) carriedOut(obj *v1alpha1.ProjectMCP) string {
	token := obj.Annotations[v1alpha1.AnnotationReconnectRequestedAt]
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[types.NamespacedName]handledToken{}
	}
	h.m[client.ObjectKeyFromObject(obj)] = handledToken{uid: obj.UID, token: token}
	return token
}

// forget drops what is remembered of a deleted project.
func (h *handledReconnects) forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, key)
}
