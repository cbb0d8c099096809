package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/dsh-dev/projectmcp/internal/oauth"
)

// grantWatch watches the metadata of the grant Secrets (labelled oauth.LabelGrant): a login
// that writes one, a logout that deletes it, or another replica's write-back makes the keeper
// read it again, and the project is reconciled (its server's tools come back, or go). Only the
// name and the two annotations naming the project and server are kept.
type grantWatch struct {
	informer toolscache.SharedIndexInformer
}

func newGrantWatch(mgr manager.Manager) (*grantWatch, error) {
	mc, err := metadata.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	inf := metadatainformer.NewFilteredMetadataInformer(mc, corev1.SchemeGroupVersion.WithResource("secrets"),
		metav1.NamespaceAll, 0, toolscache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = oauth.LabelGrant + "=true" }).Informer()
	if err := inf.SetTransform(grantOnly); err != nil {
		return nil, err
	}
	w := &grantWatch{informer: inf}
	return w, mgr.Add(w)
}

// Start runs the watch until ctx ends (manager.Runnable).
func (w *grantWatch) Start(ctx context.Context) error {
	w.informer.Run(ctx.Done())
	return nil
}

// grantOnly keeps a grant Secret's name, namespace, version and the annotations naming its
// project and server.
func grantOnly(in any) (any, error) {
	m, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return in, nil
	}
	kept := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Annotations: map[string]string{}}
	for _, a := range []string{oauth.AnnotationGrantProject, oauth.AnnotationGrantServer} {
		kept.Annotations[a] = m.Annotations[a]
	}
	m.ObjectMeta = kept
	return m, nil
}

// source enqueues the project a grant Secret names, after telling its keeper to read it again.
func (w *grantWatch) source(r *Reconciler) source.Source {
	return &source.TypedInformer[*metav1.PartialObjectMetadata, reconcile.Request]{
		Informer: w.informer,
		Handler: handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, m *metav1.PartialObjectMetadata) []reconcile.Request {
			project, server := m.Annotations[oauth.AnnotationGrantProject], m.Annotations[oauth.AnnotationGrantServer]
			if project == "" || m.Name != oauth.SecretName(project, server) {
				return nil // not a grant login wrote: its keeper never reads it
			}
			key := types.NamespacedName{Namespace: m.Namespace, Name: project}
			r.reloadGrant(key, server)
			return []reconcile.Request{{NamespacedName: key}}
		}),
	}
}
