package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Image is what a runtime stage of the Dockerfile promises the manifests.
type Image struct {
	Stage      string
	UID, GID   int64
	Entrypoint []string
	Cmd        []string
	Home       string // ENV HOME
	Binary     string // where the build stage's binary is copied to
	BinaryFrom string // the stage and path it is copied from, "build:/out/projectmcp"
}

// Image reads a runtime stage. USER must be numeric (uid:gid): with runAsNonRoot the kubelet
// can only check a numeric user, and the manifests name the same numbers.
func (d *Dockerfile) Image(stage string) (Image, error) {
	st := d.Stage(stage)
	if st == nil {
		return Image{}, fmt.Errorf("no stage %q", stage)
	}
	img := Image{Stage: stage}
	user, ok := st.Last("USER")
	if !ok {
		return Image{}, fmt.Errorf("stage %s has no USER: it would run as root", stage)
	}
	uid, gid, ok := strings.Cut(user.Value, ":")
	var err1, err2 error
	img.UID, err1 = strconv.ParseInt(uid, 10, 64)
	img.GID, err2 = strconv.ParseInt(gid, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return Image{}, fmt.Errorf("line %d: USER %q: want numeric UID:GID", user.Line, user.Value)
	}
	ep, ok := st.Last("ENTRYPOINT")
	if !ok {
		return Image{}, fmt.Errorf("stage %s has no ENTRYPOINT", stage)
	}
	if img.Entrypoint, err1 = ep.ExecForm(); err1 != nil {
		return Image{}, err1
	}
	if cmd, ok := st.Last("CMD"); ok {
		if img.Cmd, err1 = cmd.ExecForm(); err1 != nil {
			return Image{}, err1
		}
	}
	env, err := st.Env()
	if err != nil {
		return Image{}, err
	}
	img.Home = env["HOME"]
	copies, err := st.Copies()
	if err != nil {
		return Image{}, err
	}
	for _, c := range copies {
		if c.From != "" && len(c.Sources) == 1 {
			img.Binary, img.BinaryFrom = c.Dest, c.From+":"+c.Sources[0]
		}
	}
	return img, nil
}

// DecodeObjects splits a multi-document YAML stream into objects, skipping empty documents.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Find returns the object of that kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// OfKind returns the objects of a kind.
func OfKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Convert fills a typed object from an unstructured one, refusing fields the type lacks.
func Convert(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true)
}

// FlagValue returns the value of --name in args (as --name=v or --name v) and whether it is
// there; the last one wins, as with the flag packages.
func FlagValue(args []string, name string) (string, bool) {
	val, found := "", false
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			val, found = v, true
		} else if a == "--"+name && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			val, found = args[i+1], true
		}
	}
	return val, found
}

// Controller returns the install's controller Deployment and its container (the only one).
func Controller(objs []*unstructured.Unstructured) (*appsv1.Deployment, *corev1.Container, error) {
	deps := OfKind(objs, "Deployment")
	if len(deps) != 1 {
		return nil, nil, fmt.Errorf("want one Deployment, have %d", len(deps))
	}
	var dep appsv1.Deployment
	if err := Convert(deps[0], &dep); err != nil {
		return nil, nil, fmt.Errorf("Deployment %s: %w", deps[0].GetName(), err)
	}
	if n := len(dep.Spec.Template.Spec.Containers); n != 1 {
		return nil, nil, fmt.Errorf("Deployment %s: want one container, have %d", dep.Name, n)
	}
	return &dep, &dep.Spec.Template.Spec.Containers[0], nil
}

// CheckInstall checks that an install (config/manager or the rendered chart) runs the image as
// built: no command (the entrypoint is the binary) and `controller` as the first argument; the
// image's uid and gid, non-root, or with --server-uid uid 0 keeping ServerCapabilities alone
// (checkUsers); a token not automounted projected at TokenPath, owner-only (checkToken); a
// read-only root filesystem with emptyDirs on HOME and /tmp;
// each bind-address flag's port declared under the name the probes and Services use; the
// probes on /healthz and /readyz; one Service in front of the gateway port, and an
// in-cluster --gateway-url naming it. It returns every mismatch found.
func CheckInstall(objs []*unstructured.Unstructured, img Image) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	dep, c, err := Controller(objs)
	if err != nil {
		return []string{err.Error()}
	}
	pod := dep.Spec.Template.Spec

	if len(c.Command) > 0 && !slices.Equal(c.Command, img.Entrypoint) {
		bad("command %q replaces the image's entrypoint %q", c.Command, img.Entrypoint)
	}
	if len(c.Args) == 0 || c.Args[0] != "controller" {
		bad("args %q: the first must be the controller subcommand", c.Args)
	}
	if len(img.Entrypoint) != 1 || img.Entrypoint[0] != img.Binary {
		bad("image %s: entrypoint %q is not the copied binary %s", img.Stage, img.Entrypoint, img.Binary)
	}

	problems = append(problems, checkUsers(pod, c, img)...)
	problems = append(problems, checkToken(pod, c)...)
	problems = append(problems, checkGatewayTLS(pod, c)...)
	if csc := c.SecurityContext; csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		bad("container securityContext: want readOnlyRootFilesystem true and allowPrivilegeEscalation false")
	}

	// HOME and /tmp are the only places the controller and its stdio servers write.
	var home string
	for _, e := range c.Env {
		if e.Name == "HOME" {
			home = e.Value
		}
	}
	if home != img.Home {
		bad("env HOME=%q, the image's HOME is %q", home, img.Home)
	}
	emptyDirs := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.EmptyDir != nil {
			emptyDirs[v.Name] = true
		}
	}
	for _, dir := range []string{img.Home, "/tmp"} {
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.MountPath == dir && emptyDirs[m.Name] && !m.ReadOnly)
		}
		if !mounted {
			bad("%s is not a writable emptyDir mount", dir)
		}
	}

	// Each port the binary binds is declared under the name the rest refers to.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for flag, name := range map[string]string{"gateway-bind-address": "gateway", "metrics-bind-address": "metrics", "health-probe-bind-address": "probes"} {
		addr, ok := FlagValue(c.Args, flag)
		if !ok {
			bad("args lack --%s", flag)
			continue
		}
		if addr == "0" {
			if _, declared := ports[name]; declared {
				bad("--%s=0 turns it off, but port %q is declared", flag, name)
			}
			continue
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "" {
			bad("--%s=%s: want :PORT (all interfaces, so the kubelet and Services reach it)", flag, addr)
			continue
		}
		if fmt.Sprint(ports[name]) != port {
			bad("--%s=%s but container port %q is %d", flag, addr, name, ports[name])
		}
	}
	for _, p := range []struct {
		what  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port != intstr.FromString("probes") {
			bad("%s probe: want GET %s on port \"probes\"", p.what, p.path)
		}
	}

	// The gateway Service: selects the pods and targets the gateway port; an in-cluster
	// --gateway-url (http://NAME.NAMESPACE.svc:PORT) names it, so status.endpoint is reachable.
	// Any other URL is the operator's (an Ingress, a load balancer) and not checked here.
	var gateway *corev1.Service
	for _, o := range OfKind(objs, "Service") {
		var svc corev1.Service
		if err := Convert(o, &svc); err != nil {
			bad("Service %s: %v", o.GetName(), err)
			continue
		}
		for _, p := range svc.Spec.Ports {
			if p.TargetPort == intstr.FromString("gateway") {
				if gateway != nil {
					bad("Services %s and %s both target the gateway port", gateway.Name, svc.Name)
				}
				gateway = &svc
			}
		}
	}
	if gateway == nil {
		bad("no Service targets the gateway port")
		return problems
	}
	for k, v := range gateway.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			bad("Service %s selects %s=%s, which the pods lack", gateway.Name, k, v)
		}
	}
	if gateway.Namespace != dep.Namespace {
		bad("the Deployment is in %q, the gateway Service in %q", dep.Namespace, gateway.Namespace)
	}
	gwURL, _ := FlagValue(c.Args, "gateway-url")
	u, err := url.Parse(gwURL)
	if err != nil || gwURL == "" {
		bad("--gateway-url=%q: want a URL", gwURL)
		return problems
	}
	if !strings.HasSuffix(u.Hostname(), ".svc") {
		return problems
	}
	scheme := "http"
	if _, tls := FlagValue(c.Args, "gateway-tls-cert"); tls {
		scheme = "https"
	}
	if want := fmt.Sprintf("%s.%s.svc", gateway.Name, gateway.Namespace); u.Hostname() != want || u.Scheme != scheme {
		bad("--gateway-url=%s: the gateway Service is %s://%s", gwURL, scheme, want)
	}
	found := false
	for _, p := range gateway.Spec.Ports {
		found = found || (fmt.Sprint(p.Port) == u.Port() && p.TargetPort == intstr.FromString("gateway"))
	}
	if !found {
		bad("--gateway-url=%s: Service %s has no port %s to the gateway", gwURL, gateway.Name, u.Port())
	}
	return problems
}

// ServerCapabilities are the capabilities a controller starting its stdio servers as another
// user keeps (internal/policy's NeededCapabilities), all others dropped.
var ServerCapabilities = []corev1.Capability{"SETUID", "SETGID", "KILL", "CHOWN"}

// TokenPath is where client-go's in-cluster configuration reads the ServiceAccount's token,
// CA and namespace.
const TokenPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// checkUsers checks who the controller runs as. With --server-uid: uid 0 with
// ServerCapabilities alone, servers as a uid other than 0 and the image's own; without it: the
// image's non-root user with no capability.
func checkUsers(pod corev1.PodSpec, c *corev1.Container, img Image) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	sc := pod.SecurityContext
	if sc == nil {
		return []string{"no pod securityContext"}
	}
	var caps *corev1.Capabilities
	if c.SecurityContext != nil {
		caps = c.SecurityContext.Capabilities
	}
	if caps == nil || !slices.Equal(caps.Drop, []corev1.Capability{"ALL"}) {
		bad("container securityContext: capabilities must drop ALL")
	}
	uid, apart := FlagValue(c.Args, "server-uid")
	if !apart {
		switch {
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			bad("pod securityContext: runAsNonRoot must be true")
		case sc.RunAsUser == nil || *sc.RunAsUser != img.UID:
			bad("pod securityContext: runAsUser must be the image's uid %d", img.UID)
		case sc.RunAsGroup == nil || *sc.RunAsGroup != img.GID:
			bad("pod securityContext: runAsGroup must be the image's gid %d", img.GID)
		}
		if caps != nil && len(caps.Add) > 0 {
			bad("container securityContext: capabilities %v added, but no --server-uid needs them", caps.Add)
		}
		return problems
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 || (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) {
		bad("pod securityContext: with --server-uid the controller runs as uid 0 (runAsUser 0, runAsNonRoot not true)")
	}
	if caps != nil && !slices.Equal(caps.Add, ServerCapabilities) {
		bad("container securityContext: with --server-uid capabilities add %v, want exactly %v", caps.Add, ServerCapabilities)
	}
	gid, _ := FlagValue(c.Args, "server-gid")
	for flag, v := range map[string]string{"--server-uid": uid, "--server-gid": gid} {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
			bad("%s=%q: want a user id other than 0", flag, v)
		}
	}
	return problems
}

// checkToken checks that a token not automounted is mounted at TokenPath, as a projected
// volume with the token, the cluster's CA and the namespace, the token readable by its owner
// alone.
func checkToken(pod corev1.PodSpec, c *corev1.Container) []string {
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		return nil
	}
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == TokenPath {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		return []string{"automountServiceAccountToken is false, but nothing is mounted read-only at " + TokenPath}
	}
	var vol *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == mount.Name {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil || vol.Projected == nil || vol.Projected.DefaultMode == nil {
		return []string{fmt.Sprintf("volume %q at %s: want a projected volume with a defaultMode", mount.Name, TokenPath)}
	}
	var problems []string
	if mode := *vol.Projected.DefaultMode; mode&0o077 != 0 {
		problems = append(problems, fmt.Sprintf("volume %q: the token's mode %#o is readable by others than its owner", vol.Name, mode))
	}
	var token, ca, namespace bool
	for _, src := range vol.Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil && src.ServiceAccountToken.Path == "token":
			token = src.ServiceAccountToken.Audience == ""
		case src.ServiceAccountToken != nil && src.ServiceAccountToken.Audience == "":
			// Another token (the replicas' own, --replica-token-file) is for another audience:
			// one the API server takes is the controller's token under another name.
			problems = append(problems, fmt.Sprintf("volume %q: token %q is for the API server's audience", vol.Name, src.ServiceAccountToken.Path))
		case src.ConfigMap != nil:
			ca = src.ConfigMap.Name == "kube-root-ca.crt" && len(src.ConfigMap.Items) == 1 && src.ConfigMap.Items[0].Path == "ca.crt"
		case src.DownwardAPI != nil:
			namespace = len(src.DownwardAPI.Items) == 1 && src.DownwardAPI.Items[0].Path == "namespace" &&
				src.DownwardAPI.Items[0].FieldRef != nil && src.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.namespace"
		}
	}
	if !token || !ca || !namespace {
		problems = append(problems, fmt.Sprintf("volume %q: want token (the API server's audience), ca.crt of kube-root-ca.crt and namespace; token %v, ca.crt %v, namespace %v", vol.Name, token, ca, namespace))
	}
	return problems
}

// checkGatewayTLS checks that --gateway-tls-cert and --gateway-tls-key, when given, name files
// of one Secret mounted read-only, the key readable by its owner alone when servers run as
// another user (--server-uid).
func checkGatewayTLS(pod corev1.PodSpec, c *corev1.Container) []string {
	cert, hasCert := FlagValue(c.Args, "gateway-tls-cert")
	key, hasKey := FlagValue(c.Args, "gateway-tls-key")
	if !hasCert && !hasKey {
		return nil
	}
	if !hasCert || !hasKey || filepath.Dir(cert) != filepath.Dir(key) {
		return []string{fmt.Sprintf("--gateway-tls-cert=%q and --gateway-tls-key=%q: want both, in one directory", cert, key)}
	}
	for _, m := range c.VolumeMounts {
		if m.MountPath != filepath.Dir(cert) {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.Secret == nil || !m.ReadOnly:
				return []string{fmt.Sprintf("volume %q at %s: want a Secret mounted read-only", v.Name, m.MountPath)}
			case filepath.Base(cert) != "tls.crt" || filepath.Base(key) != "tls.key":
				return []string{fmt.Sprintf("--gateway-tls-cert=%s, --gateway-tls-key=%s: a kubernetes.io/tls Secret holds tls.crt and tls.key", cert, key)}
			}
			if _, apart := FlagValue(c.Args, "server-uid"); apart && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0) {
				return []string{fmt.Sprintf("volume %q: the gateway's key must be readable by the controller alone, not by its servers", v.Name)}
			}
			return nil
		}
	}
	return []string{fmt.Sprintf("--gateway-tls-cert=%s: no volume is mounted at %s", cert, filepath.Dir(cert))}
}
