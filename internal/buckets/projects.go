package buckets

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Pins remembers the projects pinned to a bucket (LabelPin), as the reconciler sees their
// objects, so that a request names its project's bucket without reading the object. A
// project with no pin needs no entry: its bucket is its name's hash.
type Pins struct {
	n    int
	pins sync.Map // types.NamespacedName → string (the label's value)
}

// NewPins puts projects in n buckets.
func NewPins(n int) *Pins { return &Pins{n: n} }

// Of is the bucket of the project key (Of with its pin, when it has one).
func (p *Pins) Of(key types.NamespacedName) int {
	pin, _ := p.pins.Load(key)
	s, _ := pin.(string)
	return Of(key, p.n, s)
}

// note records obj's pin (or that it has none) and returns its bucket.
func (p *Pins) note(obj *v1alpha1.ProjectMCP) int {
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	if pin, ok := obj.Labels[LabelPin]; ok {
		p.pins.Store(key, pin)
		return Of(key, p.n, pin)
	}
	p.pins.Delete(key)
	return Of(key, p.n, "")
}

// Forget drops what Pins remembers of a deleted project: one made again under the name starts
// from its own labels.
func (p *Pins) Forget(key types.NamespacedName) { p.pins.Delete(key) }

// Forget drops what the Holder remembers of a deleted project (its pin).
func (h *Holder) Forget(key types.NamespacedName) { h.cfg.Pins.Forget(key) }

// Bucket is the bucket obj is in; its pin is noted for the requests that name it.
func (h *Holder) Bucket(obj *v1alpha1.ProjectMCP) int { return h.cfg.Pins.note(obj) }

// Owner is what status.owner says of obj while this replica serves its bucket; false while it
// does not.
func (h *Holder) Owner(obj *v1alpha1.ProjectMCP) (v1alpha1.ProjectOwner, bool) {
	k := h.Bucket(obj)
	epoch, ok := h.Serving(k)
	return v1alpha1.ProjectOwner{Replica: h.cfg.Identity, Bucket: int32(k), Epoch: epoch}, ok
}

// Keeps reports whether obj's bucket is in a tenure of this replica that has not ended (not
// lost, not being handed off), even while Owner says no because its last renewal is late: a
// renewal that succeeds goes on serving the same projects, so a reconcile meanwhile waits for
// it rather than stopping them.
func (h *Holder) Keeps(obj *v1alpha1.ProjectMCP) bool {
	_, ok := (*h.serving.Load())[h.Bucket(obj)]
	return ok
}
