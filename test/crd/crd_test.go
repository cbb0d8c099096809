// Package crd tests the generated ProjectMCP CRD against a real kube-apiserver: installation,
// defaulting, admission of the bundled samples and of `projectmcp render` output, rejection of
// invalid objects with clear messages, and the printer columns kubectl shows.
package crd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	var err error
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "crd-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func TestCRDInstalled(t *testing.T) {
	mapping, err := env.Client.RESTMapper().RESTMapping(v1alpha1.GroupVersion.WithKind("ProjectMCP").GroupKind(), "v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	if mapping.Resource.Resource != "projectmcps" || mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Fatalf("unexpected mapping %+v", mapping)
	}
}

func TestSamplesAccepted(t *testing.T) {
	root, _ := testenv.RepoRoot()
	files, err := filepath.Glob(filepath.Join(root, "config", "samples", "mcp_*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("want at least two samples, got %v (%v)", files, err)
	}
	ns := namespace(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
			obj := &v1alpha1.ProjectMCP{}
			if err := dec.Decode(obj); err != nil {
				t.Fatal(err)
			}
			obj.Namespace = ns
			if err := env.Client.Create(context.Background(), obj); err != nil {
				t.Fatalf("the API server refused %s: %v", f, err)
			}
		})
	}
}

// TestRenderedExampleAccepted is the foundation's promise end to end: render the bundled
// example and apply it.
func TestRenderedExampleAccepted(t *testing.T) {
	root, _ := testenv.RepoRoot()
	path := filepath.Join(root, "examples", "demo", ".dsh", "mcp.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := config.Parse(path, data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := config.Render(spec, config.NameFor(path), namespace(t))
	if err != nil {
		t.Fatal(err)
	}
	obj := &v1alpha1.ProjectMCP{}
	if err := yaml.UnmarshalStrict(out, obj); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("the API server refused the rendered example: %v\n%s", err, out)
	}
	got := &v1alpha1.ProjectMCP{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Servers) != 3 || got.Spec.Servers[0].Name != "docs" || !got.Spec.Servers[0].Disabled {
		t.Fatalf("servers did not round-trip: %+v", got.Spec.Servers)
	}
}

func TestDefaults(t *testing.T) {
	obj := &v1alpha1.ProjectMCP{
		ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: namespace(t)},
		Spec: v1alpha1.ProjectMCPSpec{
			Servers:   []v1alpha1.MCPServer{{Name: "remote", HTTP: &v1alpha1.HTTPServer{URL: "https://h.example/mcp"}}},
			Reconnect: &v1alpha1.ReconnectPolicy{},
		},
	}
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	s := obj.Spec
	switch {
	case s.IdleTimeout == nil || s.IdleTimeout.Duration != v1alpha1.DefaultIdleTimeout:
		t.Errorf("idleTimeout default: %v", s.IdleTimeout)
	case s.ReadyTimeout == nil || s.ReadyTimeout.Duration != v1alpha1.DefaultReadyTimeout:
		t.Errorf("readyTimeout default: %v", s.ReadyTimeout)
	case s.Servers[0].HTTP.Transport != v1alpha1.TransportStreamableHTTP:
		t.Errorf("transport default: %q", s.Servers[0].HTTP.Transport)
	case *s.Reconnect.MaxAttempts != v1alpha1.DefaultMaxAttempts ||
		s.Reconnect.InitialBackoff.Duration != v1alpha1.DefaultInitialBackoff ||
		s.Reconnect.MaxBackoff.Duration != v1alpha1.DefaultMaxBackoff:
		t.Errorf("reconnect defaults: %+v", s.Reconnect)
	}
}

func TestInvalidRejected(t *testing.T) {
	ns := namespace(t)
	stdio := map[string]any{"command": "npx"}
	cases := map[string]struct {
		spec map[string]any
		want []string
	}{
		"both stdio and http": {
			spec: servers(map[string]any{"name": "a", "stdio": stdio, "http": map[string]any{"url": "https://h/"}}),
			want: []string{"spec.servers[0]", "exactly one of stdio or http must be set"},
		},
		"neither stdio nor http": {
			spec: servers(map[string]any{"name": "a"}),
			want: []string{"exactly one of stdio or http must be set"},
		},
		"duplicate server names": {
			spec: servers(map[string]any{"name": "a", "stdio": stdio}, map[string]any{"name": "a", "stdio": stdio}),
			want: []string{`spec.servers[1]: Duplicate value: {"name":"a"}`},
		},
		"bad server name": {
			spec: servers(map[string]any{"name": "my.server", "stdio": stdio}),
			want: []string{"spec.servers[0].name", "should match '^[A-Za-z0-9_-]{1,64}$'"},
		},
		"server name with double underscore": {
			spec: servers(map[string]any{"name": "a__b", "stdio": stdio}),
			want: []string{"spec.servers[0].name", "name must not contain '__' nor start or end with '_'"},
		},
		"server name starting with underscore": {
			spec: servers(map[string]any{"name": "_a", "stdio": stdio}),
			want: []string{"spec.servers[0].name", "name must not contain '__' nor start or end with '_'"},
		},
		"server name ending with underscore": {
			spec: servers(map[string]any{"name": "ok", "stdio": stdio}, map[string]any{"name": "a_", "stdio": stdio}),
			want: []string{"spec.servers[1].name", "name must not contain '__' nor start or end with '_'"},
		},
		"server name too long": {
			spec: servers(map[string]any{"name": strings.Repeat("a", 65), "stdio": stdio}),
			want: []string{"spec.servers[0].name", "may not be more than 64 bytes"},
		},
		"empty command": {
			spec: servers(map[string]any{"name": "a", "stdio": map[string]any{"command": ""}}),
			want: []string{"spec.servers[0].stdio.command", "should be at least 1 chars long"},
		},
		"url not http": {
			spec: servers(map[string]any{"name": "a", "http": map[string]any{"url": "ftp://h/x"}}),
			want: []string{"spec.servers[0].http.url", "url must be an absolute http:// or https:// URL"},
		},
		"url not a URL": {
			spec: servers(map[string]any{"name": "a", "http": map[string]any{"url": "http://[::1/mcp"}}),
			want: []string{"spec.servers[0].http.url", "url is not a valid URL"},
		},
		"unknown transport": {
			spec: servers(map[string]any{"name": "a", "http": map[string]any{"url": "https://h/", "transport": "WebSocket"}}),
			want: []string{"spec.servers[0].http.transport", `Unsupported value: "WebSocket"`},
		},
		"duplicate env": {
			spec: servers(map[string]any{"name": "a", "stdio": map[string]any{"command": "x", "env": []any{
				map[string]any{"name": "K", "value": "1"}, map[string]any{"name": "K", "value": "2"}}}}),
			want: []string{"spec.servers[0].stdio.env[1]", "Duplicate value"},
		},
		"env name with equals": {
			spec: servers(map[string]any{"name": "a", "stdio": map[string]any{"command": "x", "env": []any{map[string]any{"name": "A=B"}}}}),
			want: []string{"name must not contain '='"},
		},
		"empty tool pattern": {
			spec: servers(map[string]any{"name": "a", "stdio": stdio, "tools": map[string]any{"deny": []any{""}}}),
			want: []string{"spec.servers[0].tools.deny[0]", "should be at least 1 chars long"},
		},
		"too many servers": {
			spec: manyServers(v1alpha1.MaxServers + 1),
			want: []string{"spec.servers", "must have at most 64 items"},
		},
		"negative idleTimeout": {
			spec: map[string]any{"idleTimeout": "-1s"},
			want: []string{"spec.idleTimeout", "idleTimeout must not be negative"},
		},
		"negative readyTimeout": {
			spec: map[string]any{"readyTimeout": "-5s"},
			want: []string{"spec.readyTimeout", "readyTimeout must not be negative"},
		},
		"unparsable duration": {
			spec: map[string]any{"readyTimeout": "soon"},
			want: []string{"spec.readyTimeout", `Invalid value: "soon": spec.readyTimeout in body should match`},
		},
		"negative maxAttempts": {
			spec: map[string]any{"reconnect": map[string]any{"maxAttempts": -1}},
			want: []string{"spec.reconnect.maxAttempts", "should be greater than or equal to 0"},
		},
		"zero initialBackoff": {
			spec: map[string]any{"reconnect": map[string]any{"initialBackoff": "0s"}},
			want: []string{"spec.reconnect.initialBackoff", "initialBackoff must be positive"},
		},
		"backoff bounds inverted": {
			spec: map[string]any{"reconnect": map[string]any{"initialBackoff": "1m", "maxBackoff": "1s"}},
			want: []string{"spec.reconnect", "initialBackoff must not exceed maxBackoff"},
		},
		// Exactly RBAC or Project: a policy name spelled otherwise is no policy, and must not
		// pass for the default.
		"toolAuthorization lower case": {
			spec: map[string]any{"toolAuthorization": "rbac"},
			want: []string{"spec.toolAuthorization", `Unsupported value: "rbac"`, `"Project", "RBAC"`},
		},
		"toolAuthorization unknown": {
			spec: map[string]any{"toolAuthorization": "Cedar"},
			want: []string{"spec.toolAuthorization", `Unsupported value: "Cedar"`},
		},
		"unknown field": {
			spec: map[string]any{"severs": []any{}},
			want: []string{`unknown field "spec.severs"`},
		},
	}
	i := 0
	for name, tc := range cases {
		i++
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(),
				"kind":       "ProjectMCP",
				"metadata":   map[string]any{"name": fmt.Sprintf("bad-%d", i), "namespace": ns},
				"spec":       tc.spec,
			}}
			err := env.Client.Create(context.Background(), u, client.FieldValidation("Strict"))
			if err == nil {
				t.Fatalf("the API server accepted an invalid object: %v", tc.spec)
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestValidStillAccepted guards the table above against rules so strict that they refuse good
// objects: URLs with ${VAR} references, zero timeouts, the most servers allowed and each
// toolAuthorization (absent: Project, and it stays absent).
func TestValidStillAccepted(t *testing.T) {
	ns := namespace(t)
	specs := map[string]map[string]any{
		"url with references": servers(map[string]any{"name": "a", "http": map[string]any{"url": "https://${HOST:-h.example}/mcp"}}),
		"zero timeouts":       {"idleTimeout": "0s", "readyTimeout": "0s", "reconnect": map[string]any{"maxAttempts": 0}},
		"max servers":         manyServers(v1alpha1.MaxServers),
		"server names with single underscores": servers(map[string]any{"name": "a_b", "stdio": map[string]any{"command": "x"}},
			map[string]any{"name": "a-_-b", "stdio": map[string]any{"command": "x"}}, map[string]any{"name": "-a-", "stdio": map[string]any{"command": "x"}}),
		"toolAuthorization RBAC":    {"toolAuthorization": "RBAC"},
		"toolAuthorization Project": {"toolAuthorization": "Project"},
		"toolAuthorization absent":  {},
	}
	i := 0
	for name, spec := range specs {
		i++
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(),
				"kind":       "ProjectMCP",
				"metadata":   map[string]any{"name": fmt.Sprintf("good-%d", i), "namespace": ns},
				"spec":       spec,
			}}
			if err := env.Client.Create(context.Background(), u); err != nil {
				t.Fatalf("refused a valid object: %v", err)
			}
			got, _, _ := unstructured.NestedString(u.Object, "spec", "toolAuthorization")
			if want, _ := spec["toolAuthorization"].(string); got != want {
				t.Errorf("toolAuthorization %q stored as %q", want, got)
			}
		})
	}
}

func servers(s ...map[string]any) map[string]any {
	list := make([]any, len(s))
	for i := range s {
		list[i] = s[i]
	}
	return map[string]any{"servers": list}
}

func manyServers(n int) map[string]any {
	list := make([]map[string]any, n)
	for i := range list {
		list[i] = map[string]any{"name": fmt.Sprintf("s%d", i), "stdio": map[string]any{"command": "x"}}
	}
	return servers(list...)
}

// TestPrinterColumns runs the real kubectl against the envtest API server.
func TestPrinterColumns(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	ns := namespace(t)
	obj := &v1alpha1.ProjectMCP{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{{Name: "a", Stdio: &v1alpha1.StdioServer{Command: "x"}}}},
	}
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj.Status = v1alpha1.ProjectMCPStatus{
		Endpoint:     "http://127.0.0.1:8484/projects/" + ns + "/web/mcp",
		ReadyServers: "1/2",
		ToolCount:    7,
		SessionCount: 3,
		Owner:        &v1alpha1.ProjectOwner{Replica: "projectmcp-7d9-x2c-a41f0e", Bucket: 4, Epoch: 1},
		Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonServersConnecting,
			Message: "1 of 2 servers connecting", LastTransitionTime: metav1.NewTime(time.Now()),
		}},
	}
	if err := env.Client.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	get := func(args ...string) []string {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", env.Kubeconfig, "get", "-n", ns}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	lines := get("projectmcp")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME READY SERVERS TOOLS SESSIONS AGE" {
		t.Fatalf("unexpected header:\n%s", strings.Join(lines, "\n"))
	}
	if f := strings.Fields(lines[1]); len(f) != 6 || strings.Join(f[:5], " ") != "web False 1/2 7 3" {
		t.Fatalf("unexpected row: %q", lines[1])
	}
	wide := get("pmcp", "-o", "wide") // the short name works too
	// connectionCount is 0 here, so its column is blank and the row's fields skip it.
	if h, f := strings.Fields(wide[0]), strings.Fields(wide[1]); strings.Join(h[len(h)-3:], " ") != "ENDPOINT CONNECTIONS OWNER" ||
		strings.Join(f[len(f)-2:], " ") != obj.Status.Endpoint+" "+obj.Status.Owner.Replica {
		t.Fatalf("-o wide lacks the endpoint and the owner:\n%s", strings.Join(wide, "\n"))
	}
}

// TestKustomizeDefaultApplies applies config/default (CRD, RBAC, Deployment, Services) with the real
// kubectl, as a cluster install would.
func TestKustomizeDefaultApplies(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	root, _ := testenv.RepoRoot()
	out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "apply", "-k", filepath.Join(root, "config", "default")).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -k config/default: %v\n%s", err, out)
	}
	for _, want := range []string{"deployment.apps/projectmcp-controller", "clusterrole.rbac.authorization.k8s.io/projectmcp-controller",
		"serviceaccount/projectmcp-controller", "service/projectmcp-gateway", "service/projectmcp-metrics"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("apply output lacks %s:\n%s", want, out)
		}
	}
}

// status.owner fences status writes: within a bucket the epoch never goes back, so a replica
// that lost the project's bucket cannot overwrite the next holder's status. A project pinned
// to another bucket starts that bucket's count.
func TestOwnerEpochFencesStatus(t *testing.T) {
	ns := namespace(t)
	obj := &v1alpha1.ProjectMCP{
		ObjectMeta: metav1.ObjectMeta{Name: "fenced", Namespace: ns},
		Spec:       v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{{Name: "a", Stdio: &v1alpha1.StdioServer{Command: "x"}}}},
	}
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	write := func(replica string, bucket int32, epoch int64) error {
		obj.Status.Owner = &v1alpha1.ProjectOwner{Replica: replica, Bucket: bucket, Epoch: epoch}
		err := env.Client.Status().Update(ctx, obj)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		return err
	}
	for _, step := range []struct {
		replica string
		bucket  int32
		epoch   int64
		refused bool
	}{
		{"a", 3, 4, false},
		{"b", 3, 5, false}, // the next holder
		{"a", 3, 4, true},  // the one before it, late
		{"b", 3, 5, false}, // the holder again, same epoch
		{"c", 9, 1, false}, // pinned to another bucket: its own count
		{"c", 9, 0, true},
	} {
		err := write(step.replica, step.bucket, step.epoch)
		if refused := err != nil; refused != step.refused {
			t.Fatalf("%s writing epoch %d of bucket %d: refused=%v (%v), want %v", step.replica, step.epoch, step.bucket, refused, err, step.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "no longer holds the project's bucket") {
			t.Fatalf("the refusal does not say why: %v", err)
		}
	}
	if got := obj.Status.Owner; got == nil || got.Replica != "c" || got.Epoch != 1 {
		t.Fatalf("status.owner after the writes: %+v", got)
	}
}

// Every .dsh/mcp.json adopt makes of the corpus of agent configs (test/configs), with the keys
// of Claude Code's and VS Code's entries, is admitted as the reader gives it, and they round-trip.
func TestCorpusAccepted(t *testing.T) {
	root, _ := testenv.RepoRoot()
	files, err := filepath.Glob(filepath.Join(root, "test", "configs", "*", "*", "want.dsh.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for i, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		spec, err := config.Parse(path, data)
		if err != nil {
			t.Fatal(err)
		}
		obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("corpus-%d", i), Namespace: namespace(t)}, Spec: *spec}
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatalf("%s: the API server refused what the reader accepted: %v", path, err)
		}
		got := &v1alpha1.ProjectMCP{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(spec.Servers, got.Spec.Servers); d != "" {
			t.Errorf("%s: servers did not round-trip (-file +stored):\n%s", path, d)
		}
	}
}
