package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/audit"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// rbacIdentity is a ServiceAccount of TestGatewayToolRBAC with the items its Role grants
// (besides `use` on the project), or bound to a ClusterRole of its own.
type rbacIdentity struct {
	name  string
	rules []rbacv1.PolicyRule
	// clusterRole, when set, is what the identity is bound to instead (rules unused).
	clusterRole *rbacv1.ClusterRole
	// tools, prompts and resources: what it must see on the project endpoint (resources:
	// listed URIs and templates).
	tools, prompts, resources []string
	token                     string
}

func itemRule(resource string, names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{"mcp.dsh.dev"}, Resources: []string{resource}, ResourceNames: names, Verbs: []string{access.ItemVerb}}
}

// With spec.toolAuthorization: RBAC, each identity lists exactly the tools, prompts and
// resources cluster RBAC grants it and may use exactly those, through the project endpoint and
// the endpoint of each server it is granted something of, on both protocol revisions;
// `kubectl auth can-i` gives the same answers; the audit log records the uses and the
// refusals. The example ClusterRole of config/rbac, as the file has it, grants every prompt and
// resource and no tool.
func TestGatewayToolRBAC(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "shop", v1alpha1.ProjectMCPSpec{ToolAuthorization: v1alpha1.ToolAuthorizationRBAC,
		Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a"), harness.FixtureServer(t, "b")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready, every tool in status", func(obj *v1alpha1.ProjectMCP) bool {
		return harness.IsReady(obj) && len(statusTools(obj)) > 0 && len(statusTools(obj)) == int(obj.Status.ToolCount)
	})
	cs, err := kubernetes.NewForConfig(harness.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	probes := []string{"echo", "fail", "pids"}
	ids := []*rbacIdentity{
		{name: "everything", rules: []rbacv1.PolicyRule{itemRule("tools", "shop/*"), itemRule("prompts", "shop/*"), itemRule("resources", "shop/*")},
			prompts: []string{"a__greet", "b__greet"}, resources: []string{"fixture://a/readme", "fixture://b/readme", "fixture://a/items/{id}", "fixture://b/items/{id}"}},
		{name: "release", rules: []rbacv1.PolicyRule{itemRule("tools", "shop/a__*"), itemRule("resources", "shop/fixture://a/items/{id}")},
			resources: []string{"fixture://a/items/{id}"}},
		{name: "reader", rules: []rbacv1.PolicyRule{itemRule("tools", "shop/a__echo", "shop/b__echo"), itemRule("prompts", "shop/b__greet"),
			itemRule("resources", "shop/fixture://b/readme")},
			tools: []string{"a__echo", "b__echo"}, prompts: []string{"b__greet"}, resources: []string{"fixture://b/readme"}},
		{name: "nobody"},
		{name: "example", clusterRole: exampleClusterRole(t, ns),
			prompts: []string{"a__greet", "b__greet"}, resources: []string{"fixture://a/readme", "fixture://b/readme", "fixture://a/items/{id}", "fixture://b/items/{id}"}},
	}
	for _, id := range ids {
		if id.clusterRole != nil {
			id.token = bindClusterRole(t, cs, ns, id.name, id.clusterRole)
			continue
		}
		id.token = grant(t, cs, ns, id.name, id.rules)
	}
	logPath := filepath.Join(t.TempDir(), "audit.log")
	log, err := audit.Open(logPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, Auth: &access.KubernetesAuth{Client: cs}, Audit: log})
	project := base + gateway.Path(key)
	denials := promtest.ToFloat64(metrics.ItemDenials.WithLabelValues("tools"))

	// The whole catalog is what status lists: the identity granted everything sees all of it,
	// the one granted shop/a__* a's tools.
	ids[0].tools = statusTools(obj)
	for _, name := range ids[0].tools {
		if strings.HasPrefix(name, "a__") {
			ids[1].tools = append(ids[1].tools, name)
		}
	}
	all := rbacSession(t, project, ids[0].token, "2025-11-25")

	for _, id := range ids {
		for _, revision := range []string{"2025-11-25", ""} {
			t.Run(id.name+"/"+revisionName(revision), func(t *testing.T) {
				s := rbacSession(t, project, id.token, revision)
				checkItems(t, s, id, []serverNames{{"a__", "fixture://a"}, {"b__", "fixture://b"}})
				for _, server := range []string{"a", "b"} {
					for _, tool := range probes {
						checkCall(t, s, server+"__"+tool, slices.Contains(id.tools, server+"__"+tool))
					}
				}
				// The endpoint for the rest (without a): b's items, the same decisions under the
				// projected names.
				rest := rbacSession(t, project+"?"+gateway.ExceptParam+"=a", id.token, revision)
				checkItems(t, rest, ofServer(id, "b"), []serverNames{{"b__", "fixture://b"}})
				for _, tool := range probes {
					checkCall(t, rest, "b__"+tool, slices.Contains(id.tools, "b__"+tool))
				}
				// Each server's endpoint: the same decisions under the server's own names, for
				// an identity granted something of the server; one granted nothing of it is
				// refused the session.
				for _, server := range []string{"a", "b"} {
					want := onServer(id, server)
					if len(want.tools)+len(want.prompts)+len(want.resources) == 0 {
						mountRefused(t, base+gateway.ServerPath(key, server), id.token, revision)
						continue
					}
					view := rbacSession(t, base+gateway.ServerPath(key, server), id.token, revision)
					checkItems(t, view, want, []serverNames{{"", "fixture://" + server}})
					for _, tool := range probes {
						checkCall(t, view, tool, slices.Contains(want.tools, tool))
					}
					// A name no list holds goes to the server only on a wildcard grant: the
					// gateway reviews the catalog's names, never ones a caller makes up.
					if !slices.Contains(want.tools, "pids") {
						checkCall(t, view, "made_up_tool", false)
					}
				}
			})
		}
	}

	// Subscriptions, on both revisions (2026-07-28: in a subscriptions/listen stream): reader
	// hears of b's readme, granted it, and never of a's.
	for _, revision := range []string{"2025-11-25", ""} {
		t.Run("subscriptions/"+revisionName(revision), func(t *testing.T) {
			checkSubscriptions(t, project, ids[2].token, all, revision)
		})
	}

	// kubectl auth can-i asks what the gateway asks: an item is granted when it says yes for
	// one of the item's names (its own, its server's wildcard, the project's).
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is needed to check `kubectl auth can-i` against the gateway's decisions")
	}
	canI := func(id *rbacIdentity, it access.Item) bool {
		for _, name := range access.ResourceNames("shop", it) {
			out, _ := exec.Command(kubectl, "--kubeconfig", harness.Env.Kubeconfig, "auth", "can-i", access.ItemVerb,
				it.Resource+".mcp.dsh.dev/"+name, "-n", ns, "--as", "system:serviceaccount:"+ns+":"+id.name).CombinedOutput()
			if lastLine(string(out)) == "yes" {
				return true
			}
		}
		return false
	}
	for _, id := range ids {
		for _, q := range []struct {
			item    access.Item
			granted bool
		}{
			{access.Item{Resource: "tools", Server: "a", Name: "echo"}, slices.Contains(id.tools, "a__echo")},
			{access.Item{Resource: "tools", Server: "b", Name: "fail"}, slices.Contains(id.tools, "b__fail")},
			{access.Item{Resource: "prompts", Server: "b", Name: "greet"}, slices.Contains(id.prompts, "b__greet")},
			{access.Item{Resource: "resources", Server: "b", Name: "fixture://b/readme"}, slices.Contains(id.resources, "fixture://b/readme")},
		} {
			if got := canI(id, q.item); got != q.granted {
				t.Errorf("%s: kubectl auth can-i call %s %v says %v, the gateway decided %v", id.name, q.item.Resource, q.item, got, q.granted)
			}
		}
	}

	if d := promtest.ToFloat64(metrics.ItemDenials.WithLabelValues("tools")) - denials; d == 0 {
		t.Error("no denial counted in projectmcp_gateway_item_denials_total")
	}
	checkAudit(t, logPath, ns)
}

// statusTools are the tools status lists for the project's servers, sorted: its projected
// names, as the project endpoint lists them.
func statusTools(obj *v1alpha1.ProjectMCP) []string {
	var names []string
	for _, s := range obj.Status.Servers {
		names = append(names, s.Tools...)
	}
	return sortedCopy(names)
}

// exampleClusterRole is the example ClusterRole of config/rbac, renamed for the namespace ns
// (ClusterRoles are cluster-wide), its rules as the file has them.
func exampleClusterRole(t *testing.T, ns string) *rbacv1.ClusterRole {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "example_readonly_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	if role.Kind != "ClusterRole" || len(role.Rules) == 0 {
		t.Fatalf("config/rbac/example_readonly_role.yaml holds %s %q with %d rules, want a ClusterRole", role.Kind, role.Name, len(role.Rules))
	}
	role.Name += "-" + ns
	return role
}

// bindClusterRole creates a ServiceAccount bound in ns to role alone (created for the test)
// and returns a token of it.
func bindClusterRole(t *testing.T, cs kubernetes.Interface, ns, name string, role *rbacv1.ClusterRole) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
	if err := harness.Env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	harness.Env.DeleteOnCleanup(t, role)
	if err := harness.Env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	return token(t, cs, ns, name)
}

// grant creates a ServiceAccount that may use the project shop and is granted rules, and
// returns a token of it.
func grant(t *testing.T, cs kubernetes.Interface, ns, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"mcp.dsh.dev"}, Resources: []string{"projectmcps"}, ResourceNames: []string{"shop"}, Verbs: []string{access.UseVerb}})
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
	if err := harness.Env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := harness.Env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	return token(t, cs, ns, name)
}

// token is a token of the ServiceAccount ns/name.
func token(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// rbacSession connects a Go SDK client with token; revision "" is the SDK's default,
// 2026-07-28.
func rbacSession(t *testing.T, url, token, revision string) *mcp.ClientSession {
	t.Helper()
	header := http.Header{"Authorization": {"Bearer " + token}}
	if revision == "" {
		header.Set(gateway.SessionHeader, "rbac")
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "rbac-test", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: harness.HeaderRT{H: header}}},
		&mcp.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sessionTools(t *testing.T, s *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := []string{}
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// serverNames are how an endpoint names one server's items: prefix before its tools' and
// prompts' names ("a__" on the project endpoint, "" on the server's own), and the base of its
// resources' URIs.
type serverNames struct{ prefix, uris string }

// onServer is what id must see on the endpoint of server: its items of that server, under the
// server's own names.
func onServer(id *rbacIdentity, server string) *rbacIdentity {
	view := &rbacIdentity{name: id.name, tools: []string{}, prompts: []string{}, resources: []string{}}
	for _, name := range id.tools {
		if raw, ok := strings.CutPrefix(name, server+"__"); ok {
			view.tools = append(view.tools, raw)
		}
	}
	for _, name := range id.prompts {
		if raw, ok := strings.CutPrefix(name, server+"__"); ok {
			view.prompts = append(view.prompts, raw)
		}
	}
	for _, uri := range id.resources {
		if strings.HasPrefix(uri, "fixture://"+server+"/") {
			view.resources = append(view.resources, uri)
		}
	}
	return view
}

// ofServer is what id must see of server alone under the projected names, as the project
// endpoint leaving the other servers out lists them.
func ofServer(id *rbacIdentity, server string) *rbacIdentity {
	of := &rbacIdentity{name: id.name, tools: []string{}, prompts: []string{}, resources: []string{}}
	for _, name := range id.tools {
		if strings.HasPrefix(name, server+"__") {
			of.tools = append(of.tools, name)
		}
	}
	for _, name := range id.prompts {
		if strings.HasPrefix(name, server+"__") {
			of.prompts = append(of.prompts, name)
		}
	}
	for _, uri := range id.resources {
		if strings.HasPrefix(uri, "fixture://"+server+"/") {
			of.resources = append(of.resources, uri)
		}
	}
	return of
}

// checkItems checks that s lists exactly the identity's tools, prompts and resources, and may
// get and read exactly those, of the servers named so.
func checkItems(t *testing.T, s *mcp.ClientSession, id *rbacIdentity, servers []serverNames) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got := sessionTools(t, s); !slices.Equal(got, sortedCopy(id.tools)) {
		t.Errorf("lists tools %v, want %v", got, id.tools)
	}
	prompts := []string{}
	for p, err := range s.Prompts(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, p.Name)
	}
	if slices.Sort(prompts); !slices.Equal(prompts, sortedCopy(id.prompts)) {
		t.Errorf("lists prompts %v, want %v", prompts, id.prompts)
	}
	resources := []string{}
	for r, err := range s.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		resources = append(resources, r.URI)
	}
	for r, err := range s.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		resources = append(resources, r.URITemplate)
	}
	if slices.Sort(resources); !slices.Equal(resources, sortedCopy(id.resources)) {
		t.Errorf("lists resources %v, want %v", resources, id.resources)
	}
	for _, server := range servers {
		greet := server.prefix + "greet"
		_, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: greet, Arguments: map[string]string{"name": "x"}})
		agree(t, "prompts/get "+greet, err, slices.Contains(id.prompts, greet))
		readme := server.uris + "/readme"
		_, err = s.ReadResource(ctx, &mcp.ReadResourceParams{URI: readme})
		agree(t, "resources/read "+readme, err, slices.Contains(id.resources, readme))
		_, err = s.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: greet},
			Argument: mcp.CompleteParamsArgument{Name: "name", Value: "A"}})
		agree(t, "completion/complete of "+greet, err, slices.Contains(id.prompts, greet))
		item := server.uris + "/items/7"
		_, err = s.ReadResource(ctx, &mcp.ReadResourceParams{URI: item})
		agree(t, "resources/read "+item, err, slices.Contains(id.resources, server.uris+"/items/{id}"))
	}
}

// checkCall calls a probe tool and checks that it is refused exactly when it is not listed.
func checkCall(t *testing.T, s *mcp.ClientSession, name string, listed bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "hi", "message": "as asked"}})
	agree(t, "tools/call "+name, err, listed)
}

// agree fails unless a use was refused by the RBAC policy exactly when it is not granted.
func agree(t *testing.T, what string, err error, granted bool) {
	t.Helper()
	refused := err != nil && strings.Contains(err.Error(), "is not allowed for this identity")
	switch {
	case granted && err != nil:
		t.Errorf("%s: granted, but failed: %v", what, err)
	case !granted && !refused:
		t.Errorf("%s: not granted, but answered (error %v)", what, err)
	}
}

// checkAudit checks the audit log: uses and refusals, each with its principal, policy and
// decision, a session hash and no arguments.
func checkAudit(t *testing.T, path, ns string) {
	t.Helper()
	var records []audit.Record
	testutil.Eventually(t, 10*time.Second, "the audit log written", func() bool {
		records = readAudit(t, path)
		return slices.ContainsFunc(records, func(r audit.Record) bool { return r.Decision == "deny" }) &&
			slices.ContainsFunc(records, func(r audit.Record) bool { return r.Decision == "allow" && r.Tool == "echo" })
	})
	for _, r := range records {
		if r.Policy != "RBAC" || r.Project != ns+"/shop" || !strings.HasPrefix(r.Principal, "user:system:serviceaccount:"+ns+":") ||
			r.Server == "" || r.Method == "" || len(r.Arguments) != 0 || len(r.Session) != 16 {
			t.Fatalf("audit record %+v", r)
		}
		if (r.Decision == "deny") != (r.Outcome == "denied") {
			t.Fatalf("audit record %+v: decision and outcome disagree", r)
		}
	}
	denied := slices.ContainsFunc(records, func(r audit.Record) bool {
		return r.Decision == "deny" && r.Tool == "fail" && r.Server == "a" && strings.Contains(r.Principal, ":"+ns+":reader/")
	})
	if !denied {
		t.Error("the audit log has no refusal of reader's call of a__fail")
	}
}

func readAudit(t *testing.T, path string) []audit.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func revisionName(r string) string {
	if r == "" {
		return "2026-07-28"
	}
	return r
}

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	slices.Sort(out)
	return out
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// checkSubscriptions subscribes a session of token (granted fixture://b/readme, not a's) to
// both readmes, has toucher touch a's and then b's, and checks that only b's update arrives.
func checkSubscriptions(t *testing.T, url, token string, toucher *mcp.ClientSession, revision string) {
	t.Helper()
	updated := make(chan string, 16)
	header := http.Header{"Authorization": {"Bearer " + token}}
	if revision == "" {
		header.Set(gateway.SessionHeader, "rbac-subscriber")
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "rbac-subscriber", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: harness.HeaderRT{H: header}}},
		&mcp.ClientSessionOptions{ProtocolVersion: revision})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Subscribe(ctx, &mcp.SubscribeParams{URI: "fixture://a/readme"})
	if revision != "" {
		agree(t, "resources/subscribe fixture://a/readme", err, false)
	}
	if err := s.Subscribe(ctx, &mcp.SubscribeParams{URI: "fixture://b/readme"}); err != nil {
		t.Fatalf("subscribing to the granted fixture://b/readme: %v", err)
	}
	touch := func(server string) {
		t.Helper()
		uri := "fixture://" + server + "/readme"
		if _, err := toucher.CallTool(ctx, &mcp.CallToolParams{Name: server + "__touch_resource", Arguments: map[string]any{"uri": uri}}); err != nil {
			t.Fatal(err)
		}
	}
	// The subscriptions are in place once b's update comes through.
	testutil.Eventually(t, 15*time.Second, "b's update", func() bool {
		touch("b")
		select {
		case uri := <-updated:
			if uri != "fixture://b/readme" {
				t.Fatalf("update of %s, not granted", uri)
			}
			return true
		case <-time.After(300 * time.Millisecond):
			return false
		}
	})
	// a's update, were it relayed, would come before b's second one.
	touch("a")
	time.Sleep(500 * time.Millisecond)
	touch("b")
	select {
	case uri := <-updated:
		if uri != "fixture://b/readme" {
			t.Fatalf("update of %s, whose subscription RBAC does not grant", uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b's second update never came")
	}
}
