package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
)

// A Secret serves a ProjectMCP's server only by the Secret's consent: its annotation
// v1alpha1.AnnotationAllowedProjects names the ProjectMCP (or is "*"), and its annotation
// v1alpha1.AnnotationAllowedDestinations names the server's destination (destinations.go).
// Whoever may write a ProjectMCP need not be allowed to read Secrets, and the controller reads
// them with its own identity; the annotations are the Secret owner's word that this project may
// use the values, and where they may go.

// secretConsent is what a project's Secret says about one of its servers, as the planner sees
// it: a change of consent rebuilds the connections of the servers that use variables.
type secretConsent string

const (
	consentNone      secretConsent = ""          // no spec.secretRef
	consentGranted   secretConsent = "granted"   // the Secret names the project and the server's destination
	consentRefused   secretConsent = "refused"   // the Secret exists and does not name the project
	consentElsewhere secretConsent = "elsewhere" // the Secret names the project, not the server's destination
	consentAbsent    secretConsent = "absent"    // no such Secret
)

// consentAnnotations are the annotations of a Secret that say what it consents to.
var consentAnnotations = []string{v1alpha1.AnnotationAllowedProjects, v1alpha1.AnnotationAllowedDestinations}

// allowsProject reports whether an allowed-projects annotation value names project: a
// comma-separated list of names (spaces around them ignored), or "*".
func allowsProject(annotation, project string) bool {
	for _, name := range strings.Split(annotation, ",") {
		if name = strings.TrimSpace(name); name == "*" || name == project {
			return true
		}
	}
	return false
}

// consentOf is what a Secret's annotations say about a server of project whose values would
// go to destination.
func consentOf(annotations map[string]string, project, destination string) secretConsent {
	switch {
	case !allowsProject(annotations[v1alpha1.AnnotationAllowedProjects], project):
		return consentRefused
	case !parseDestinations(annotations[v1alpha1.AnnotationAllowedDestinations]).named[destination]:
		return consentElsewhere
	}
	return consentGranted
}

// secretError is a refusal to use a Secret's values; retrying cannot heal it (a change of the
// Secret's consent rebuilds the connection).
type secretError struct{ msg string }

func (e *secretError) Error() string   { return e.msg }
func (e *secretError) Permanent() bool { return true }

// refusal explains why a Secret does not serve a project, naming the rule and the fix.
func refusal(secret, project string, annotations map[string]string) error {
	if _, ok := annotations[v1alpha1.AnnotationAllowedProjects]; ok {
		return &secretError{fmt.Sprintf("Secret %q does not allow ProjectMCP %q to use it: add %s to its annotation %s",
			secret, project, project, v1alpha1.AnnotationAllowedProjects)}
	}
	return &secretError{fmt.Sprintf("Secret %q does not allow ProjectMCP %q to use it: add the annotation %s: %s",
		secret, project, v1alpha1.AnnotationAllowedProjects, project)}
}

// usesVariables reports whether any expanded field of a server has a ${...} reference: only
// such a server reads the project's Secret.
func usesVariables(s v1alpha1.MCPServer) bool {
	return slices.ContainsFunc(expandedFields(s), func(f field) bool { return strings.Contains(f.value, "${") })
}

// field is one value of a server's config that ${VAR} expansion applies to.
type field struct{ where, value string }

// expandedFields are the values of a server's config that ${VAR} expansion applies to.
func expandedFields(s v1alpha1.MCPServer) []field {
	var fs []field
	if st := s.Stdio; st != nil {
		fs = append(commandLine(st), field{"workingDir", st.WorkingDir})
		for _, kv := range st.Env {
			fs = append(fs, field{fmt.Sprintf("env %q", kv.Name), kv.Value})
		}
	}
	if h := s.HTTP; h != nil {
		fs = append(fs, field{"url", h.URL})
		for _, kv := range h.Headers {
			fs = append(fs, field{fmt.Sprintf("header %q", kv.Name), kv.Value})
		}
	}
	return fs
}

// commandLine are the fields of a stdio server's command line: the command and its args.
func commandLine(st *v1alpha1.StdioServer) []field {
	fs := []field{{"command", st.Command}}
	for i, a := range st.Args {
		fs = append(fs, field{fmt.Sprintf("args[%d]", i), a})
	}
	return fs
}

// secretInCommandLine refuses a stdio server whose command or args refer to a key of the
// Secret: a process's command line is readable by every user of the machine
// (/proc/<pid>/cmdline), whatever uid the server runs as. A reference the Secret has no key for
// expands to its default (or fails as missing), which is not the Secret's.
func secretInCommandLine(s v1alpha1.MCPServer, secret string, keys map[string][]byte) error {
	if s.Stdio == nil {
		return nil
	}
	for _, f := range commandLine(s.Stdio) {
		names, err := config.References(f.value)
		if err != nil {
			continue // the expansion reports the syntax error
		}
		for _, name := range names {
			if _, ok := keys[name]; ok {
				return &secretError{fmt.Sprintf("server %q: %s refers to ${%s}, a key of Secret %q: a process's command line is readable by every user of the machine; pass the value in env instead",
					s.Name, f.where, name, secret)}
			}
		}
	}
	return nil
}

// secretVariables are the values a server's ${VAR} references expand to from the project's
// Secret, once the Secret allows the project, the server keeps them off its command line, and
// the Secret allows them to go to the server's destination.
func secretVariables(secret *corev1.Secret, project string, s v1alpha1.MCPServer) (map[string]string, error) {
	if !allowsProject(secret.Annotations[v1alpha1.AnnotationAllowedProjects], project) {
		return nil, refusal(secret.Name, project, secret.Annotations)
	}
	if err := secretInCommandLine(s, secret.Name, secret.Data); err != nil {
		return nil, err
	}
	vars := make(map[string]string, len(secret.Data))
	for k, v := range secret.Data {
		vars[k] = string(v)
	}
	lookup := func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	if err := secretDestination(s, secret.Name, secret.Annotations, lookup); err != nil {
		return nil, err
	}
	return vars, nil
}

// variablesFunc reads a server's variables at each connect attempt, from the Secret as the API
// server has it (uncached, so the consent checked is the current one). A server without
// references reads nothing: it runs whatever the Secret says.
func (r *Reconciler) variablesFunc(obj *v1alpha1.ProjectMCP, s v1alpha1.MCPServer) func(context.Context) (map[string]string, error) {
	ref := obj.Spec.SecretRef
	if ref == nil || ref.Name == "" || !usesVariables(s) {
		return nil
	}
	key, project := types.NamespacedName{Namespace: obj.Namespace, Name: ref.Name}, obj.Name
	return func(ctx context.Context) (map[string]string, error) {
		secret := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, key, secret); err != nil {
			return nil, fmt.Errorf("secret %q: %w", key.Name, err)
		}
		return secretVariables(secret, project, s)
	}
}

// consentOnly is the consent watch's transform: it keeps a Secret's name, namespace, version
// and consent annotations, and nothing else. Other annotations may hold the values themselves
// (kubectl's last-applied-configuration), and the controller keeps no Secret values in memory.
func consentOnly(in any) (any, error) {
	m, ok := in.(*metav1.PartialObjectMetadata)
	if !ok {
		return in, nil
	}
	kept := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
	for _, a := range consentAnnotations {
		if v, ok := m.Annotations[a]; ok {
			if kept.Annotations == nil {
				kept.Annotations = map[string]string{}
			}
			kept.Annotations[a] = v
		}
	}
	m.ObjectMeta = kept
	return m, nil
}

// consentWatch holds Secrets' metadata, reduced by consentOnly: an informer of the metadata
// API of its own (client-go's, whose watch ends cleanly when the manager stops).
type consentWatch struct {
	informer toolscache.SharedIndexInformer
}

// newConsentWatch starts watching Secrets' metadata with the manager.
func newConsentWatch(mgr manager.Manager) (*consentWatch, error) {
	mc, err := metadata.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	inf := metadatainformer.NewFilteredMetadataInformer(mc, corev1.SchemeGroupVersion.WithResource("secrets"),
		metav1.NamespaceAll, 0, toolscache.Indexers{}, nil).Informer()
	if err := inf.SetTransform(consentOnly); err != nil {
		return nil, err
	}
	w := &consentWatch{informer: inf}
	return w, mgr.Add(w)
}

// Start runs the watch until ctx ends (manager.Runnable).
func (w *consentWatch) Start(ctx context.Context) error {
	w.informer.Run(ctx.Done())
	return nil
}

// consentSyncWait bounds how long a reconcile waits for the first list of Secrets' metadata;
// past it the reconcile fails and is retried, so that a watch the controller's role forbids
// does not hold every worker.
const consentSyncWait = 10 * time.Second

// annotations are a Secret's consent annotations as the watch has it; false when there is no
// such Secret. It waits for the first list, so that a controller's start does not take every
// Secret for absent.
func (w *consentWatch) annotations(ctx context.Context, key types.NamespacedName) (map[string]string, bool, error) {
	wait, cancel := context.WithTimeout(ctx, consentSyncWait)
	defer cancel()
	if !toolscache.WaitForCacheSync(wait.Done(), w.informer.HasSynced) {
		return nil, false, fmt.Errorf("the Secrets' metadata are not listed yet (the controller needs list and watch on secrets): %w", context.Cause(wait))
	}
	obj, ok, err := w.informer.GetStore().GetByKey(key.Namespace + "/" + key.Name)
	if err != nil || !ok {
		return nil, false, err
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil, false, fmt.Errorf("secret %q: unexpected %T in the metadata watch", key.Name, obj)
	}
	return m.Annotations, true, nil
}

// source enqueues the projects whose spec.secretRef names a Secret that appeared, disappeared
// or changed a consent annotation.
func (w *consentWatch) source(projects func(context.Context, *metav1.PartialObjectMetadata) []reconcile.Request) source.Source {
	return &source.TypedInformer[*metav1.PartialObjectMetadata, reconcile.Request]{
		Informer: w.informer,
		Handler:  handler.TypedEnqueueRequestsFromMapFunc(projects),
		Predicates: []predicate.TypedPredicate[*metav1.PartialObjectMetadata]{predicate.TypedFuncs[*metav1.PartialObjectMetadata]{
			UpdateFunc: func(e event.TypedUpdateEvent[*metav1.PartialObjectMetadata]) bool {
				return slices.ContainsFunc(consentAnnotations, func(a string) bool {
					return e.ObjectOld.Annotations[a] != e.ObjectNew.Annotations[a]
				})
			},
		}},
	}
}

// projectsNaming are the projects of a Secret's namespace whose spec.secretRef names it.
func (r *Reconciler) projectsNaming(ctx context.Context, secret *metav1.PartialObjectMetadata) []reconcile.Request {
	list := &v1alpha1.ProjectMCPList{}
	if err := r.Client.List(ctx, list, client.InNamespace(secret.Namespace)); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range list.Items {
		if ref := p.Spec.SecretRef; ref != nil && ref.Name == secret.Name {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)})
		}
	}
	return reqs
}

// serverConsent is what a project's Secret says about each of its servers.
type serverConsent func(v1alpha1.MCPServer) secretConsent

// consentIs is a serverConsent that says the same of every server.
func consentIs(c secretConsent) serverConsent {
	return func(v1alpha1.MCPServer) secretConsent { return c }
}

// consent is what the project's Secret says about its servers, from the consent watch. The
// watch holds no values, so a server's destination is the one found without them: at connect,
// a destination the values would change is refused (secretDestination).
func (r *Reconciler) consent(ctx context.Context, obj *v1alpha1.ProjectMCP) (serverConsent, error) {
	ref := obj.Spec.SecretRef
	if ref == nil || ref.Name == "" || r.consents == nil {
		return consentIs(consentNone), nil
	}
	annotations, found, err := r.consents.annotations(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: ref.Name})
	switch {
	case err != nil:
		return nil, err
	case !found:
		return consentIs(consentAbsent), nil
	}
	return func(s v1alpha1.MCPServer) secretConsent {
		dest, _ := destinationOf(s, withoutValues)
		return consentOf(annotations, obj.Name, dest)
	}, nil
}
