//go:build deploy

package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/dsh-dev/projectmcp/internal/testenv"
)

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm is the helm CLI, a go tool of the hack/tools module (kept out of the main go.mod, whose
// dependency tree it would triple). `make test-deploy` builds it first; go caches the binary.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	helmOnce.Do(func() {
		cmd := exec.Command("go", "tool", "-n", "helm")
		cmd.Dir = filepath.Join(root(t), "hack", "tools")
		out, err := cmd.Output()
		if err != nil {
			helmErr = fmt.Errorf("go tool -n helm (in hack/tools): %w", err)
			return
		}
		helmPath = strings.Fields(string(out))[0]
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	cmd := exec.Command(helmPath, args...)
	cmd.Dir = root(t)
	// No user's helm configuration or repositories: the chart needs none.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

const (
	chartDir    = "charts/projectmcp"
	allFeatures = "test/deploy/testdata/all-features.yaml"
)

// render runs helm template for release projectmcp in namespace projectmcp-system (the names
// config/default uses), with the CRDs, and the extra helm arguments (-f, --set).
func render(t testing.TB, extra ...string) ([]*unstructured.Unstructured, string) {
	t.Helper()
	args := append([]string{"template", "projectmcp", chartDir, "--namespace", "projectmcp-system", "--include-crds"}, extra...)
	out, err := helm(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	objs, err := DecodeObjects([]byte(out))
	if err != nil {
		t.Fatalf("the rendered chart is not YAML: %v", err)
	}
	return objs, out
}

func imageOf(t testing.TB, stage string) Image {
	t.Helper()
	img, err := dockerfile(t).Image(stage)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestChartLint(t *testing.T) {
	for _, extra := range [][]string{nil, {"-f", allFeatures}} {
		if out, err := helm(t, append([]string{"lint", "--strict", chartDir}, extra...)...); err != nil {
			t.Errorf("helm lint --strict %q: %v\n%s", extra, err, out)
		}
	}
}

// With default values, `helm install projectmcp -n projectmcp-system` is config/default less
// the Namespace (helm's --create-namespace makes it): the same objects under the same names,
// the generated CRD and ClusterRole rules, the same pod spec (image, args, user, probes,
// volumes, resources) and the same Service ports.
func TestChartDefaultsMatchConfigDefault(t *testing.T) {
	chart, _ := render(t)
	out, err := exec.Command("kubectl", "kustomize", filepath.Join(root(t), "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	kustomized, err := DecodeObjects(out)
	if err != nil {
		t.Fatal(err)
	}
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
	}
	var want, have []string
	for _, o := range kustomized {
		if o.GetKind() != "Namespace" {
			want = append(want, key(o))
		}
	}
	for _, o := range chart {
		have = append(have, key(o))
	}
	slices.Sort(want)
	slices.Sort(have)
	if d := cmp.Diff(want, have); d != "" {
		t.Fatalf("objects (-config/default +chart):\n%s", d)
	}

	same := func(kind, name string, fields ...string) {
		t.Helper()
		a, b := Find(kustomized, kind, name), Find(chart, kind, name)
		av, _, _ := unstructured.NestedFieldNoCopy(a.Object, fields...)
		bv, _, _ := unstructured.NestedFieldNoCopy(b.Object, fields...)
		if av == nil {
			t.Errorf("%s %s has no %s", kind, name, strings.Join(fields, "."))
		}
		if d := cmp.Diff(av, bv); d != "" {
			t.Errorf("%s %s %s (-config/default +chart):\n%s", kind, name, strings.Join(fields, "."), d)
		}
	}
	same("CustomResourceDefinition", "projectmcps.mcp.dsh.dev", "spec")
	same("ClusterRole", "projectmcp-controller", "rules")
	same("ClusterRoleBinding", "projectmcp-controller", "roleRef")
	same("ClusterRoleBinding", "projectmcp-controller", "subjects")
	same("Role", "projectmcp-controller", "rules")
	same("RoleBinding", "projectmcp-controller", "roleRef")
	same("RoleBinding", "projectmcp-controller", "subjects")
	same("ClusterRole", "projectmcp-metrics-reader", "rules")
	// The bucket Leases are the Role's, in the controller's namespace alone: the ClusterRole
	// grants no Lease anywhere.
	if rules := fmt.Sprint(Find(chart, "ClusterRole", "projectmcp-controller").Object["rules"]); strings.Contains(rules, "leases") {
		t.Errorf("the ClusterRole grants Leases in every namespace: %s", rules)
	}
	if rules := fmt.Sprint(Find(chart, "Role", "projectmcp-controller").Object["rules"]); !strings.Contains(rules, "leases") {
		t.Errorf("the Role grants no Leases: %s", rules)
	}
	same("Deployment", "projectmcp-controller", "spec", "replicas")
	same("Deployment", "projectmcp-controller", "spec", "template", "spec")
	for _, svc := range []string{"projectmcp-gateway", "projectmcp-metrics"} {
		same("Service", svc, "spec", "ports")
	}
	same("Service", "projectmcp-metrics", "spec", "publishNotReadyAddresses")

	for _, p := range CheckInstall(chart, imageOf(t, "static")) {
		t.Errorf("the chart with the static image: %s", p)
	}
	_, c, err := Controller(chart)
	if err != nil {
		t.Fatal(err)
	}
	if ref := imageRef(t); c.Image != ref {
		t.Errorf("the chart runs %s, make docker-build tags %s", c.Image, ref)
	}
	checkArgsParse(t, imageBinary(t), c.Args)
}

// Every optional value reaches the object it is for, the result still runs the image as built,
// and its args are ones the binary accepts.
func TestChartAllFeatures(t *testing.T) {
	objs, _ := render(t, "-f", allFeatures)
	for _, p := range CheckInstall(objs, imageOf(t, "node")) {
		t.Errorf("the chart with the node image: %s", p)
	}
	dep, c, err := Controller(objs)
	if err != nil {
		t.Fatal(err)
	}
	checkArgsParse(t, imageBinary(t), c.Args)

	if *dep.Spec.Replicas != 2 || c.Image != "registry.example.com/team/projectmcp:0.2.0-node" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("replicas %d, image %s (%s)", *dep.Spec.Replicas, c.Image, c.ImagePullPolicy)
	}
	// Two replicas: a drain takes them one at a time, each handing its buckets off first.
	if pdbs := OfKind(objs, "PodDisruptionBudget"); len(pdbs) != 1 {
		t.Errorf("%d PodDisruptionBudgets for two replicas, want 1", len(pdbs))
	} else if v, _, _ := unstructured.NestedFieldNoCopy(pdbs[0].Object, "spec", "maxUnavailable"); fmt.Sprint(v) != "1" {
		t.Errorf("the PodDisruptionBudget's maxUnavailable is %v, want 1", v)
	}
	for _, arg := range []string{"--allow-command=npx", "--allow-command=/opt/mcp/*", "--gateway-url=https://mcp.example.com",
		"--session-timeout=1h", "--call-timeout=10m", "--zap-log-level=debug", "--connect-timeout=1m",
		"--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s",
		"--gateway-bind-address=:9484", "--metrics-bind-address=:9090", "--metrics-project-labels", "--health-probe-bind-address=:9081",
		"--gateway-auth=kubernetes", "--gateway-tls-cert=/etc/projectmcp/gateway-tls/tls.crt", "--gateway-tls-key=/etc/projectmcp/gateway-tls/tls.key",
		"--gateway-audience=projectmcp", "--gateway-audience=mcp.example.com", "--buckets=16",
		"--gateway-oauth-issuer=https://issuer.example.com", "--gateway-oauth-issuer=https://login.example.com/tenant",
		"--gateway-oauth-scope=openid", "--gateway-oauth-scope=mcp", "--project-root-base=/srv/projects", "--metrics-secure"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args lack %s: %q", arg, c.Args)
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			ref := e.ValueFrom.ResourceFieldRef
			env[e.Name] = "resourceFieldRef " + ref.ContainerName + " " + ref.Resource
		}
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = "fieldRef " + e.ValueFrom.FieldRef.FieldPath
		}
	}
	if d := cmp.Diff(map[string]string{
		"HOME":                        "/home/nonroot",
		"PROJECTMCP_MEMORY_LIMIT":     "resourceFieldRef controller limits.memory", // the soft memory limit's base
		"POD_IP":                      "fieldRef status.podIP",                     // --advertise-address
		"POD_NAMESPACE":               "fieldRef metadata.namespace",               // the bucket Leases' namespace
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability.svc:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_SERVICE_NAME":           "projectmcp-test",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.25",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment=test,team=platform",
		"OTEL_EXPORTER_OTLP_HEADERS":  "x-tenant=platform",
		"NPM_CONFIG_REGISTRY":         "https://npm.example.com/",
	}, env); d != "" {
		t.Errorf("env (-want +have):\n%s", d)
	}
	pod := dep.Spec.Template
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g != 90 {
		t.Errorf("terminationGracePeriodSeconds %v, want 90 (the handoff's room)", g)
	}
	if pod.Spec.ServiceAccountName != "mcp-controller" || pod.Labels["team"] != "platform" || pod.Annotations["example.com/scrape"] != "false" ||
		pod.Spec.NodeSelector["kubernetes.io/os"] != "linux" || len(pod.Spec.Tolerations) != 1 || pod.Spec.Affinity == nil ||
		pod.Spec.PriorityClassName != "system-cluster-critical" || len(pod.Spec.ImagePullSecrets) != 1 ||
		c.Resources.Limits.Memory().String() != "1Gi" || c.Resources.Requests.Cpu().String() != "200m" {
		t.Errorf("pod template: %+v", pod)
	}
	// The chart's example ClusterRole grants what config/rbac's does, which
	// internal/gateway's TestGatewayToolRBAC binds and checks.
	if example := Find(objs, "ClusterRole", "projectmcp-example-readonly"); example == nil {
		t.Error("the example ClusterRole for RBAC tool authorization is missing")
	} else if d := cmp.Diff(exampleRules(t), example.Object["rules"]); d != "" {
		t.Errorf("the chart's example ClusterRole differs from config/rbac/example_readonly_role.yaml (-config +chart):\n%s", d)
	}
	if sa := Find(objs, "ServiceAccount", "mcp-controller"); sa == nil || sa.GetAnnotations()["example.com/role"] != "mcp" {
		t.Errorf("ServiceAccount mcp-controller: %v", sa)
	}
	if crb := Find(objs, "ClusterRoleBinding", "projectmcp-controller"); crb == nil ||
		!strings.Contains(fmt.Sprint(crb.Object["subjects"]), "name:mcp-controller namespace:projectmcp-system") {
		t.Errorf("the ClusterRoleBinding must name the ServiceAccount: %v", crb)
	}
	if rb := Find(objs, "RoleBinding", "projectmcp-controller"); rb == nil || rb.GetNamespace() != "projectmcp-system" ||
		!strings.Contains(fmt.Sprint(rb.Object["subjects"]), "name:mcp-controller namespace:projectmcp-system") {
		t.Errorf("the RoleBinding of the Leases must name the ServiceAccount, in the release's namespace: %v", rb)
	}

	var gw, metrics corev1.Service
	if err := Convert(Find(objs, "Service", "projectmcp-gateway"), &gw); err != nil {
		t.Fatal(err)
	}
	if err := Convert(Find(objs, "Service", "projectmcp-metrics"), &metrics); err != nil {
		t.Fatal(err)
	}
	if gw.Spec.Type != corev1.ServiceTypeLoadBalancer || gw.Annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] != "true" || gw.Spec.Ports[0].Port != 9484 {
		t.Errorf("gateway Service: %+v", gw.Spec)
	}
	if metrics.Spec.Ports[0].Port != 9090 || !metrics.Spec.PublishNotReadyAddresses {
		t.Errorf("metrics Service: %+v", metrics.Spec)
	}

	// The ServiceMonitor selects the metrics Service alone and scrapes its named port.
	sm := Find(objs, "ServiceMonitor", "projectmcp")
	if sm == nil {
		t.Fatal("no ServiceMonitor")
	}
	if sm.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v", sm.GetLabels())
	}
	sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	matches := func(labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !matches(metrics.Labels) || matches(gw.Labels) {
		t.Errorf("ServiceMonitor selector %v: metrics Service labels %v, gateway Service labels %v", sel, metrics.Labels, gw.Labels)
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	// HTTPS with Prometheus's own token, which --metrics-secure reviews.
	if d := cmp.Diff([]any{map[string]any{"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s",
		"scheme": "https", "tlsConfig": map[string]any{"insecureSkipVerify": true},
		"bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}}, endpoints); d != "" {
		t.Errorf("ServiceMonitor endpoints (-want +have):\n%s", d)
	}
}

// The defaults that keep tokens, files and metrics to themselves: the gateway accepts tokens for
// its own audience only (not the API server's), no project's folder is a root (no project lies
// under /nonexistent, so spec.project "/" hands a filesystem server nothing), and /metrics is
// served over TLS to reviewed, authorized callers. Turned off, the flags go.
func TestChartSecureDefaults(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want map[string][]string
	}{
		{want: map[string][]string{"gateway-audience": {"projectmcp"}, "project-root-base": {"/nonexistent"}, "metrics-secure": {""}}},
		{set: []string{"--set", "gateway.audiences=null,projectRootBase=,metrics.secure=false"}, want: map[string][]string{}},
	} {
		objs, _ := render(t, tc.set...)
		_, c, err := Controller(objs)
		if err != nil {
			t.Fatal(err)
		}
		checkArgsParse(t, imageBinary(t), c.Args)
		for _, flag := range []string{"gateway-audience", "project-root-base", "gateway-oauth-issuer", "gateway-oauth-scope", "metrics-secure"} {
			var got []string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
					got = append(got, v)
				} else if a == "--"+flag {
					got = append(got, "")
				}
			}
			if !slices.Equal(got, tc.want[flag]) {
				t.Errorf("%v: --%s %q, want %q", tc.set, flag, got, tc.want[flag])
			}
		}
	}
}

// Optional parts off: without metrics there is no metrics Service or port and the endpoint is
// off; with an existing ServiceAccount and no RBAC, neither is created and the pods use it.
func TestChartOptionalPartsOff(t *testing.T) {
	objs, _ := render(t, "--set", "metrics.enabled=false,serviceAccount.create=false,serviceAccount.name=existing,rbac.create=false")
	for _, p := range CheckInstall(objs, imageOf(t, "static")) {
		t.Error(p)
	}
	dep, c, err := Controller(objs)
	if err != nil {
		t.Fatal(err)
	}
	checkArgsParse(t, imageBinary(t), c.Args)
	if slices.Contains(c.Args, "--metrics-secure") || Find(objs, "ClusterRole", "projectmcp-metrics-reader") != nil {
		t.Errorf("metrics off: --metrics-secure or the metrics-reader ClusterRole rendered: %q", c.Args)
	}
	if v, _ := FlagValue(c.Args, "metrics-bind-address"); v != "0" || Find(objs, "Service", "projectmcp-metrics") != nil {
		t.Errorf("metrics off: --metrics-bind-address=%s, metrics Service %v", v, Find(objs, "Service", "projectmcp-metrics"))
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "existing" {
		t.Errorf("serviceAccountName %q", dep.Spec.Template.Spec.ServiceAccountName)
	}
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceMonitor", "Certificate"} {
		if n := len(OfKind(objs, kind)); n != 0 {
			t.Errorf("%d %s rendered", n, kind)
		}
	}
}

// exampleRules are the rules of config/rbac/example_readonly_role.yaml.
func exampleRules(t *testing.T) any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), "config", "rbac", "example_readonly_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeObjects(data)
	if err != nil || len(objs) != 1 {
		t.Fatalf("config/rbac/example_readonly_role.yaml: %d objects, %v", len(objs), err)
	}
	return objs[0].Object["rules"]
}

// Bad values fail the render with a message naming the value and what is wrong.
func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"allowCommand={npx}", "additional properties 'allowCommand' not allowed"},
		{"gateway.auth=local", `gateway.auth: "local" does not work in a cluster; use "kubernetes"`},
		{"tracing.enabled=true", "tracing.endpoint: tracing.enabled needs the collector's OTLP endpoint"},
		{"metrics.enabled=false,metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.enabled needs metrics.enabled"},
		{"serviceAccount.create=false", "serviceAccount.name: name an existing ServiceAccount"},
		{"replicaCount=0", "/replicaCount"},
		{"image.variant=python", "/image/variant"},
		{"gateway.port=70000", "/gateway/port"},
		{"allowCommands[0]=", "/allowCommands/0"},
		{"gateway.oauth.scopes={openid}", "gateway.oauth.scopes: scopes need gateway.oauth.issuers"},
		{"gateway.oauth.issuers={http://issuer.example.com}", "/gateway/oauth/issuers/0"},
		{"projectRootBase=projects", "/projectRootBase"},
	} {
		out, err := helm(t, "template", "projectmcp", chartDir, "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("--set %s: %v, output lacks %q:\n%s", tc.set, err, tc.want, out)
		}
	}
}

// The rendered chart, with default values and with every optional feature on, is accepted by
// a real API server (server-side apply, dry run): every object's schema, the ServiceMonitor's
// against the prometheus-operator CRD generated from its Go types. A broken manifest is
// refused, so the dry run does check. Pod Security "baseline" admits the controller's pod.
func TestChartAppliesToAPIServer(t *testing.T) {
	testenv.Require(t)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "projectmcp-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubectl := func(args ...string) (string, error) {
		out, err := exec.Command("kubectl", append([]string{"--kubeconfig", env.Kubeconfig}, args...)...).CombinedOutput()
		return string(out), err
	}

	// The ServiceMonitor CRD, generated by controller-gen from prometheus-operator's API types
	// (a dependency of hack/tools), installed for real.
	crds := t.TempDir()
	gen := exec.Command("go", "tool", "controller-gen", "crd:maxDescLen=0",
		"paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1", "output:crd:dir="+crds)
	gen.Dir = filepath.Join(root(t), "hack", "tools")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("generating the ServiceMonitor CRD: %v\n%s", err, out)
	}
	sm := filepath.Join(crds, "monitoring.coreos.com_servicemonitors.yaml")
	if out, err := kubectl("apply", "--server-side", "-f", sm); err != nil {
		t.Fatalf("installing the ServiceMonitor CRD: %v\n%s", err, out)
	}
	if out, err := kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/servicemonitors.monitoring.coreos.com"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	apply := func(name, manifests string) (string, error) {
		file := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(file, []byte(manifests), 0o600); err != nil {
			t.Fatal(err)
		}
		return kubectl("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", file)
	}
	for _, tc := range []struct {
		name  string
		extra []string
	}{{"defaults", nil}, {"all-features", []string{"-f", allFeatures}}} {
		objs, manifests := render(t, tc.extra...)
		out, err := apply(tc.name, manifests)
		if err != nil {
			t.Errorf("%s: kubectl apply --server-side --dry-run=server: %v\n%s", tc.name, err, out)
			continue
		}
		if n := strings.Count(out, "serverside-applied (server dry run)"); n != len(objs) {
			t.Errorf("%s: %d of %d objects applied:\n%s", tc.name, n, len(objs), out)
		}
		if tc.name == "all-features" && !strings.Contains(out, "servicemonitor.monitoring.coreos.com/projectmcp serverside-applied") {
			t.Errorf("all-features: no ServiceMonitor applied:\n%s", out)
		}
	}

	_, manifests := render(t, "-f", allFeatures)
	broken := strings.Replace(manifests, "interval: 15s", "interval: every so often", 1)
	if out, err := apply("broken", broken); err == nil || !strings.Contains(out, "interval") {
		t.Errorf("a ServiceMonitor with interval %q was accepted: %v\n%s", "every so often", err, out)
	}
	checkPodSecurity(t, env, apply)
}

// checkPodSecurity applies the chart (dry run) to namespaces whose Pod Security level is
// "baseline" and "restricted" (warn and enforce). Under baseline it applies without a warning
// and its controller's pod is admitted; under restricted the chart is warned of and the pod
// refused, for the capabilities the controller keeps to start servers as another user and
// for running as uid 0. With serverUser.enabled false it fits restricted.
func checkPodSecurity(t *testing.T, env *testenv.Env, apply func(name, manifests string) (string, error)) {
	t.Helper()
	for _, tc := range []struct {
		level    string
		extra    []string
		admitted bool
	}{
		{"baseline", nil, true},
		{"restricted", nil, false},
		{"restricted", []string{"--set", "serverUser.enabled=false"}, true},
	} {
		name := strings.Join(append([]string{tc.level}, tc.extra...), " ")
		ns := "projectmcp-" + tc.level
		labels := map[string]string{"pod-security.kubernetes.io/warn": tc.level, "pod-security.kubernetes.io/enforce": tc.level}
		err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		objs, manifests := render(t, append([]string{"--namespace", ns}, tc.extra...)...)
		chartOut, chartErr := apply(ns, manifests)
		podOut, podErr := apply(ns+"-pod", controllerPod(t, objs))
		warned := strings.Contains(chartOut, `would violate PodSecurity "`+tc.level)
		switch {
		case chartErr != nil:
			t.Errorf("%s: the chart: %v\n%s", name, chartErr, chartOut)
		case tc.admitted && (warned || podErr != nil):
			t.Errorf("%s: want the chart applied with no warning and its pod admitted: %v\n%s\n%s", name, podErr, chartOut, podOut)
		case !tc.admitted && (!warned || !strings.Contains(chartOut, "capabilities")):
			t.Errorf("%s: the chart applied with no warning of its capabilities:\n%s", name, chartOut)
		case !tc.admitted && (podErr == nil || !strings.Contains(podOut, "violates PodSecurity") || !strings.Contains(podOut, "runAsUser=0")):
			t.Errorf("%s: the controller's pod was not refused for running as uid 0: %v\n%s", name, podErr, podOut)
		}
	}
}

// controllerPod is the pod the chart's Deployment (of objs) makes, as a manifest: Pod Security
// enforces on pods, and only warns of a Deployment.
func controllerPod(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	dep, _, err := Controller(objs)
	if err != nil {
		t.Fatal(err)
	}
	pod := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: dep.Name, Namespace: dep.Namespace, Labels: dep.Spec.Template.Labels},
		Spec:       dep.Spec.Template.Spec}
	data, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// By default the chart and config/default keep stdio servers apart from the controller: the
// controller runs as uid 0 with SETUID, SETGID, KILL and CHOWN alone and starts its servers as
// uid:gid 65532 (--server-uid, --server-gid); its token is not automounted but projected at
// the usual path, readable by its owner alone. serverUser and serviceAccount.projectedToken
// turn that off, back to the image's user with the token automounted.
func TestChartServersApart(t *testing.T) {
	out, err := exec.Command("kubectl", "kustomize", filepath.Join(root(t), "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	kustomized, err := DecodeObjects(out)
	if err != nil {
		t.Fatal(err)
	}
	chart, _ := render(t)
	custom, _ := render(t, "--set", "serverUser.uid=1000,serverUser.gid=2000,serviceAccount.projectedToken.expirationSeconds=7200")
	for _, tc := range []struct {
		name     string
		objs     []*unstructured.Unstructured
		uid, gid string
		expiry   int64
	}{{"chart", chart, "65532", "65532", 3607}, {"config/default", kustomized, "65532", "65532", 3607}, {"chart, other uid", custom, "1000", "2000", 7200}} {
		for _, p := range CheckInstall(tc.objs, imageOf(t, "static")) {
			t.Errorf("%s: %s", tc.name, p)
		}
		dep, c, err := Controller(tc.objs)
		if err != nil {
			t.Fatal(err)
		}
		pod := dep.Spec.Template.Spec
		if sc := pod.SecurityContext; sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.RunAsGroup == nil || *sc.RunAsGroup != 0 {
			t.Errorf("%s: pod securityContext %+v, want uid and gid 0", tc.name, sc)
		}
		caps := c.SecurityContext.Capabilities
		if !slices.Equal(caps.Drop, []corev1.Capability{"ALL"}) || !slices.Equal(caps.Add, ServerCapabilities) {
			t.Errorf("%s: capabilities %+v, want drop ALL, add %v", tc.name, caps, ServerCapabilities)
		}
		if uid, _ := FlagValue(c.Args, "server-uid"); uid != tc.uid {
			t.Errorf("%s: --server-uid=%q, want %s", tc.name, uid, tc.uid)
		}
		if gid, _ := FlagValue(c.Args, "server-gid"); gid != tc.gid {
			t.Errorf("%s: --server-gid=%q, want %s", tc.name, gid, tc.gid)
		}
		if a := pod.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("%s: automountServiceAccountToken %v, want false", tc.name, a)
		}
		vol := tokenVolume(pod, c)
		if vol == nil || *vol.Projected.DefaultMode != 0o400 || vol.Projected.Sources[0].ServiceAccountToken == nil ||
			*vol.Projected.Sources[0].ServiceAccountToken.ExpirationSeconds != tc.expiry {
			t.Errorf("%s: token volume %+v, want a projected token of mode 0400 expiring after %d s", tc.name, vol, tc.expiry)
		}
		checkArgsParse(t, imageBinary(t), c.Args)
	}

	off, _ := render(t, "--set", "serverUser.enabled=false,serviceAccount.projectedToken.enabled=false")
	for _, p := range CheckInstall(off, imageOf(t, "static")) {
		t.Errorf("off: %s", p)
	}
	dep, c, err := Controller(off)
	if err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	if _, ok := FlagValue(c.Args, "server-uid"); ok || pod.AutomountServiceAccountToken != nil || tokenVolume(pod, c) != nil ||
		len(c.SecurityContext.Capabilities.Add) != 0 || *pod.SecurityContext.RunAsUser != 65532 {
		t.Errorf("off: args %q, automount %v, capabilities %+v, runAsUser %d", c.Args, pod.AutomountServiceAccountToken,
			c.SecurityContext.Capabilities, *pod.SecurityContext.RunAsUser)
	}
	for _, set := range []string{"serverUser.uid=0", "serverUser.gid=0"} {
		if out, err := helm(t, "template", "projectmcp", chartDir, "--set", set); err == nil || !strings.Contains(out, "/serverUser/") {
			t.Errorf("--set %s: %v, want a refusal naming serverUser:\n%s", set, err, out)
		}
	}

	// CheckInstall refuses what would hand servers the token or leave the controller unable to
	// switch users.
	for _, tc := range []struct {
		name  string
		spoil func(*corev1.PodSpec, *corev1.Container)
		want  string
	}{
		{"token readable by all", func(p *corev1.PodSpec, _ *corev1.Container) {
			p.Volumes[len(p.Volumes)-1].Projected.DefaultMode = ptr.To[int32](0o644)
		}, "readable by others than its owner"},
		{"no KILL", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.SecurityContext.Capabilities.Add = []corev1.Capability{"SETUID", "SETGID", "CHOWN"}
		}, "want exactly [SETUID SETGID KILL CHOWN]"},
		{"servers as root", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.Args = append(c.Args, "--server-uid=0")
		}, `--server-uid="0"`},
		{"controller not root", func(p *corev1.PodSpec, _ *corev1.Container) {
			p.SecurityContext.RunAsUser = ptr.To[int64](65532)
		}, "runs as uid 0"},
		{"token not mounted", func(_ *corev1.PodSpec, c *corev1.Container) {
			c.VolumeMounts = c.VolumeMounts[:len(c.VolumeMounts)-1]
		}, "nothing is mounted read-only at " + TokenPath},
	} {
		objs, _ := render(t)
		dep, c, err := Controller(objs)
		if err != nil {
			t.Fatal(err)
		}
		tc.spoil(&dep.Spec.Template.Spec, c)
		pod := dep.Spec.Template.Spec
		if problems := strings.Join(append(checkUsers(pod, c, imageOf(t, "static")), checkToken(pod, c)...), "\n"); !strings.Contains(problems, tc.want) {
			t.Errorf("%s: problems %q, want one with %q", tc.name, problems, tc.want)
		}
	}
}

// tokenVolume is the volume mounted at TokenPath, nil if none is or it is not projected.
func tokenVolume(pod corev1.PodSpec, c *corev1.Container) *corev1.Volume {
	for _, m := range c.VolumeMounts {
		for i, v := range pod.Volumes {
			if m.MountPath == TokenPath && v.Name == m.Name && v.Projected != nil {
				return &pod.Volumes[i]
			}
		}
	}
	return nil
}

// gateway.tls.secretName serves the gateway over HTTPS from that Secret, mounted read-only with
// the key for the controller alone; gateway.tls.certManager.issuerRef adds a cert-manager
// Certificate for the gateway Service's names into the Secret. Either makes the default
// status.endpoint https://. Without them nothing of TLS is rendered (TestChartOptionalPartsOff).
func TestChartGatewayTLS(t *testing.T) {
	for _, tc := range []struct {
		name, set, secret string
		certificate       bool
	}{
		{"a Secret", "gateway.tls.secretName=gw-tls", "gw-tls", false},
		{"cert-manager", "gateway.tls.certManager.issuerRef.name=internal-ca,gateway.tls.certManager.issuerRef.kind=ClusterIssuer," +
			"gateway.tls.certManager.dnsNames[0]=mcp.example.com,gateway.tls.certManager.renewBefore=240h", "projectmcp-gateway-tls", true},
		{"cert-manager into a named Secret", "gateway.tls.secretName=gw-tls,gateway.tls.certManager.issuerRef.name=internal-ca", "gw-tls", true},
	} {
		objs, _ := render(t, "--set", tc.set)
		for _, p := range CheckInstall(objs, imageOf(t, "static")) {
			t.Errorf("%s: %s", tc.name, p)
		}
		dep, c, err := Controller(objs)
		if err != nil {
			t.Fatal(err)
		}
		if u, _ := FlagValue(c.Args, "gateway-url"); u != "https://projectmcp-gateway.projectmcp-system.svc:8484" {
			t.Errorf("%s: --gateway-url=%s, want the Service's https:// address", tc.name, u)
		}
		var secret *corev1.SecretVolumeSource
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name == "gateway-tls" {
				secret = v.Secret
			}
		}
		if secret == nil || secret.SecretName != tc.secret || *secret.DefaultMode != 0o400 {
			t.Errorf("%s: volume gateway-tls %+v, want Secret %s of mode 0400", tc.name, secret, tc.secret)
		}
		checkArgsParse(t, imageBinary(t), c.Args)
		cert := Find(objs, "Certificate", "projectmcp-gateway")
		if (cert != nil) != tc.certificate {
			t.Fatalf("%s: Certificate %v, want one: %v", tc.name, cert, tc.certificate)
		}
		if cert == nil {
			continue
		}
		name, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
		if name != tc.secret || !slices.Contains(dns, "projectmcp-gateway.projectmcp-system.svc") || issuer["name"] != "internal-ca" {
			t.Errorf("%s: Certificate secretName %q, dnsNames %q, issuerRef %v", tc.name, name, dns, issuer)
		}
		if strings.Contains(tc.set, "mcp.example.com") && (!slices.Contains(dns, "mcp.example.com") || issuer["kind"] != "ClusterIssuer") {
			t.Errorf("%s: dnsNames %q, issuerRef %v: the values' extra name and kind are missing", tc.name, dns, issuer)
		}
	}

	// With servers sharing the controller's uid the key is no more the controller's than
	// anything else, and CheckInstall does not ask for 0400 then.
	objs, _ := render(t, "--set", "gateway.tls.secretName=gw-tls,serverUser.enabled=false,serviceAccount.projectedToken.enabled=false")
	for _, p := range CheckInstall(objs, imageOf(t, "static")) {
		t.Errorf("servers not apart: %s", p)
	}
	if out, err := helm(t, "template", "projectmcp", chartDir, "--set", "gateway.tls.certManager.issuerRef.kind=ClusterIssuer"); err == nil ||
		!strings.Contains(out, "/gateway/tls/certManager/issuerRef") {
		t.Errorf("an issuerRef without a name: %v, want a refusal naming it:\n%s", err, out)
	}
}
