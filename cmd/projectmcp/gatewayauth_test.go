package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// authNamespace holds the gateway auth tests' ServiceAccount and projects. It is kept
// afterwards: envtest never finishes deleting a namespace.
const authNamespace = "gateway-auth"

// requestCounter counts the API requests of a rest.Config, by method and path.
type requestCounter struct {
	mu    sync.Mutex
	count map[string]int
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0 // the test measures the gateway's own bounds, not client-go's
	c.count = map[string]int{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			c.mu.Lock()
			c.count[r.Method+" "+r.URL.Path]++
			c.mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

func (c *requestCounter) get(method, path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count[method+" "+path]
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

const tokenReviewsPath = "/apis/authentication.k8s.io/v1/tokenreviews"

// agentToken creates (once) a ServiceAccount of authNamespace allowed to use every
// ProjectMCP there and returns a token for it, for the audiences given (none: the API
// server's), as `kubectl create token [--audience]` does.
func agentToken(t *testing.T, env *testenv.Env, audiences ...string) string {
	t.Helper()
	createOnce(t, env,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: authNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: authNamespace}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: authNamespace}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"projectmcps"}, Verbs: []string{access.UseVerb}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: authNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "agent", Namespace: authNamespace}}},
	)
	return saTokenFor(t, env, authNamespace, "agent", audiences...)
}

// createOnce creates the objects that do not exist yet, deleting them (namespaces excepted) when
// the test ends.
func createOnce(t *testing.T, env *testenv.Env, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		switch err := env.Client.Create(context.Background(), o); {
		case err == nil:
			if _, ns := o.(*corev1.Namespace); !ns {
				env.DeleteOnCleanup(t, o)
			}
		case !apierrors.IsAlreadyExists(err):
			t.Fatal(err)
		}
	}
}

// saTokenFor is a token of the ServiceAccount namespace/name for the audiences given (none: the
// API server's), valid an hour, as the kubelet projects one or `kubectl create token` makes one.
func saTokenFor(t *testing.T, env *testenv.Env, namespace, name string, audiences ...string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// authRequest is a request with a bearer token from an address.
func authRequest(token, remote string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	r.RemoteAddr = remote
	return r
}

// Tokens the gateway does not know are reviewed only within the per-source and the global
// budgets; past them 429 at once, without a TokenReview. A valid token is never charged: it
// keeps working during the flood, and is reviewed again when its verdict is stale even though
// its address's budget is spent.
func TestGatewayNewTokenBudgets(t *testing.T) {
	env := apiServer(t)
	good := agentToken(t, env)
	var reqs requestCounter
	cs, err := kubernetes.NewForConfig(reqs.wrap(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	a := &access.KubernetesAuth{Client: cs, Clock: clk, TTL: 30 * time.Second,
		NewTokenRate: 50, NewTokenBurst: 100, SourceRate: 5, SourceBurst: 20}
	ctx := context.Background()
	project := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: authNamespace, Name: fmt.Sprintf("p%d", i)}
	}
	const flooder = "192.0.2.1:4000"
	if _, status, msg := a.Authorize(ctx, authRequest(good, "192.0.2.9:4000"), project(0)); status != 0 {
		t.Fatalf("the valid token: %d %s", status, msg)
	}
	made := 0
	flood := func(n int, remote func(i int) string) map[int]int {
		codes := map[int]int{}
		for i := range n {
			made++
			_, status, _ := a.Authorize(ctx, authRequest(fmt.Sprintf("made-up-%d", made), remote(i)), project(0))
			codes[status]++
		}
		return codes
	}
	reviews := reqs.get(http.MethodPost, tokenReviewsPath)
	codes := flood(500, func(int) string { return flooder })
	if n := reqs.get(http.MethodPost, tokenReviewsPath) - reviews; n != 20 || codes[http.StatusUnauthorized] != 20 || codes[http.StatusTooManyRequests] != 480 {
		t.Fatalf("500 made-up tokens from one address: %v after %d TokenReviews, want 20 × 401 (its burst) and 480 × 429", codes, n)
	}
	// From many addresses: the global budget (100, of which the valid token and the flooder
	// spent 21) is the bound.
	reviews = reqs.get(http.MethodPost, tokenReviewsPath)
	codes = flood(500, func(i int) string { return fmt.Sprintf("198.51.100.%d:4000", i%250) })
	if n := reqs.get(http.MethodPost, tokenReviewsPath) - reviews; n != 79 || codes[http.StatusTooManyRequests] != 500-79 {
		t.Fatalf("500 made-up tokens from 250 addresses: %v after %d TokenReviews, want 79 (what is left of the global burst) and 421 × 429", codes, n)
	}
	reviews = reqs.get(http.MethodPost, tokenReviewsPath)
	if _, status, msg := a.Authorize(ctx, authRequest(good, flooder), project(1)); status != 0 || reqs.get(http.MethodPost, tokenReviewsPath) != reviews {
		t.Fatalf("the valid token during the flood: %d %s, %d TokenReviews", status, msg, reqs.get(http.MethodPost, tokenReviewsPath)-reviews)
	}
	clk.Step(31 * time.Second) // the valid token's verdict is stale, every budget full again
	flood(100, func(int) string { return flooder })
	reviews = reqs.get(http.MethodPost, tokenReviewsPath)
	if _, status, msg := a.Authorize(ctx, authRequest(good, flooder), project(2)); status != 0 || reqs.get(http.MethodPost, tokenReviewsPath) != reviews+1 {
		t.Fatalf("the valid token, stale, from the flooded address: %d %s after %d TokenReviews, want 0 after 1",
			status, msg, reqs.get(http.MethodPost, tokenReviewsPath)-reviews)
	}
}

// Requests past a review budget are counted as throttled (429), not denied (403): made-up
// tokens from one address past its budget of new-token reviews.
func TestGatewayThrottledCounted(t *testing.T) {
	env := apiServer(t)
	var reqs requestCounter
	gw := startGateway(t, env, &reqs, parseControllerFlags(t, "--gateway-auth", "kubernetes", "--gateway-new-token-reviews-per-source", "1"))
	key := types.NamespacedName{Namespace: authNamespace, Name: "throttled"}
	testutil.Eventually(t, 30*time.Second, "the gateway serving", func() bool {
		status, _ := post(t, gw, key, "")
		return status == http.StatusUnauthorized
	})
	throttled, unauthenticated := gatewayRequests(t, "429", "throttled"), gatewayRequests(t, "401", "unauthenticated")
	codes := map[int]int{}
	for i := range 20 {
		status, _ := post(t, gw, key, fmt.Sprintf("made-up-throttled-%d", i))
		codes[status]++
	}
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests] != 20 {
		t.Fatalf("20 made-up tokens from one address with a budget of 4: %v, want 401s, then 429s", codes)
	}
	if n := gatewayRequests(t, "429", "throttled") - throttled; n != float64(codes[http.StatusTooManyRequests]) {
		t.Errorf("projectmcp_gateway_requests_total{code=429,auth=throttled} counted %v, want %d", n, codes[http.StatusTooManyRequests])
	}
	if n := gatewayRequests(t, "401", "unauthenticated") - unauthenticated; n != float64(codes[http.StatusUnauthorized]) {
		t.Errorf("projectmcp_gateway_requests_total{code=401,auth=unauthenticated} counted %v, want %d", n, codes[http.StatusUnauthorized])
	}
}

// gatewayRequests is projectmcp_gateway_requests_total of code and auth, as the registry the
// controller serves on /metrics has it.
func gatewayRequests(t *testing.T, code, auth string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "projectmcp_gateway_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["code"] == code && labels["auth"] == auth {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Invalid tokens have a cache of their own: more of them than the valid cache holds do not
// evict a valid token (its next project costs no TokenReview), and a token refused once is
// refused again without one.
func TestGatewayInvalidTokensKeepValidCached(t *testing.T) {
	env := apiServer(t)
	good := agentToken(t, env)
	var reqs requestCounter
	cs, err := kubernetes.NewForConfig(reqs.wrap(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	a := &access.KubernetesAuth{Client: cs, NewTokenRate: 1e9, NewTokenBurst: 1 << 20, SourceRate: 1e9, SourceBurst: 1 << 20}
	ctx := context.Background()
	key := types.NamespacedName{Namespace: authNamespace, Name: "p"}
	if _, status, msg := a.Authorize(ctx, authRequest(good, "192.0.2.1:1"), key); status != 0 {
		t.Fatalf("the valid token: %d %s", status, msg)
	}
	const invalid, workers = 4500, 16 // more than the 4096 entries of the valid cache
	var next atomic.Int64
	var wrong atomic.Int32
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1); i <= invalid; i = next.Add(1) {
				if _, status, _ := a.Authorize(ctx, authRequest(fmt.Sprintf("made-up-%d", i), "192.0.2.2:1"), key); status != http.StatusUnauthorized {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if wrong.Load() > 0 {
		t.Fatalf("%d made-up tokens were not refused with 401", wrong.Load())
	}
	reviews := reqs.get(http.MethodPost, tokenReviewsPath)
	if _, status, msg := a.Authorize(ctx, authRequest(good, "192.0.2.1:1"), types.NamespacedName{Namespace: authNamespace, Name: "q"}); status != 0 {
		t.Fatalf("the valid token after the invalid ones: %d %s", status, msg)
	}
	if _, status, _ := a.Authorize(ctx, authRequest(fmt.Sprintf("made-up-%d", invalid), "192.0.2.2:1"), key); status != http.StatusUnauthorized {
		t.Fatalf("a made-up token again: %d", status)
	}
	if n := reqs.get(http.MethodPost, tokenReviewsPath) - reviews; n != 0 {
		t.Fatalf("the valid token's next project and a refused token again cost %d TokenReviews, want 0", n)
	}
}

// A valid token whose verdict is stale is reviewed again once, however many of its requests
// arrive at once: the others take the last verdict meanwhile.
func TestGatewayStaleTokenReviewedOnce(t *testing.T) {
	env := apiServer(t)
	good := agentToken(t, env)
	var reqs requestCounter
	cs, err := kubernetes.NewForConfig(reqs.wrap(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	a := &access.KubernetesAuth{Client: cs, Clock: clk, TTL: 30 * time.Second, ReviewRate: 1e9, ReviewBurst: 1 << 20}
	ctx := context.Background()
	if _, status, msg := a.Authorize(ctx, authRequest(good, "192.0.2.1:1"), types.NamespacedName{Namespace: authNamespace, Name: "p"}); status != 0 {
		t.Fatalf("the valid token: %d %s", status, msg)
	}
	clk.Step(31 * time.Second)
	reviews := reqs.get(http.MethodPost, tokenReviewsPath)
	const concurrent = 50
	var refused atomic.Int32
	var wg sync.WaitGroup
	for range concurrent {
		wg.Go(func() {
			// The project's verdict is stale too: each request needs its token's user.
			if _, status, _ := a.Authorize(ctx, authRequest(good, "192.0.2.1:1"), types.NamespacedName{Namespace: authNamespace, Name: "p"}); status != 0 {
				refused.Add(1)
			}
		})
	}
	wg.Wait()
	if n := reqs.get(http.MethodPost, tokenReviewsPath) - reviews; n != 1 || refused.Load() != 0 {
		t.Fatalf("%d requests of a stale token at once: %d refused, %d TokenReviews, want 0 and 1", concurrent, refused.Load(), n)
	}
}

// startGateway runs the gateway the flags describe (on a free loopback port) on a manager of
// its own, with no reconciler, against the API server, its API requests counted, until the
// test ends.
func startGateway(t *testing.T, env *testenv.Env, reqs *requestCounter, f *controllerFlags) *gateway.Gateway {
	t.Helper()
	cfg := reqs.wrap(env.Config)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(clock.RealClock{}, logr.Discard())
	t.Cleanup(reg.Shutdown)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := f.gateway(cfg, mgr, reg, ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return gw.Serve(ctx, ln) })); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return gw
}

// post sends a ping to a project's endpoint with a bearer token ("" for none) and returns the
// status and Retry-After.
func post(t *testing.T, gw *gateway.Gateway, key types.NamespacedName, token string) (int, string) {
	t.Helper()
	status, after, err := ping(gw, key, token)
	if err != nil {
		t.Fatal(err)
	}
	return status, after
}

// ping is post for any goroutine: it returns the error.
func ping(gw *gateway.Gateway, key types.NamespacedName, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodPost, gw.Endpoint(key), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After"), nil
}

// With --gateway-audience, a token minted for that audience (TokenRequest, as `kubectl create
// token --audience`) is accepted and one for the API server is 401; without the flag the API
// server's token is accepted as before.
func TestGatewayAudience(t *testing.T) {
	env := apiServer(t)
	forGateway, forAPIServer := agentToken(t, env, "projectmcp"), agentToken(t, env)
	missing := types.NamespacedName{Namespace: authNamespace, Name: "nowhere"} // 404 once allowed
	f := parseControllerFlags(t, "--gateway-auth", "kubernetes", "--gateway-audience", "projectmcp")
	var reqs requestCounter
	gw := startGateway(t, env, &reqs, f)
	testutil.Eventually(t, 30*time.Second, "the gateway serving", func() bool {
		status, _ := post(t, gw, missing, "")
		return status == http.StatusUnauthorized
	})
	if status, _ := post(t, gw, missing, forGateway); status != http.StatusNotFound {
		t.Errorf("a token for the audience: %d, want it accepted (404 for the missing project)", status)
	}
	if status, _ := post(t, gw, missing, forAPIServer); status != http.StatusUnauthorized {
		t.Errorf("a token for the API server: %d, want 401", status)
	}

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	a := &access.KubernetesAuth{Client: cs}
	if _, status, msg := a.Authorize(context.Background(), authRequest(forAPIServer, "192.0.2.1:1"), missing); status != 0 {
		t.Errorf("without audiences, a token for the API server: %d %s", status, msg)
	}
}

// A project the informer cache does not have costs at most one live GET per few seconds
// however often it is asked for, and one caller's misses of many names are bounded (429 with
// Retry-After past the bound, without a GET), and so are many callers' together; a project
// created afterwards is still served.
func TestGatewayMissingProjectLookups(t *testing.T) {
	env := apiServer(t)
	var reqs requestCounter
	gw := startGateway(t, env, &reqs, parseControllerFlags(t))
	nope := types.NamespacedName{Namespace: authNamespace, Name: "nope"}
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: authNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the gateway serving", func() bool {
		status, _ := post(t, gw, nope, "")
		return status == http.StatusNotFound
	})
	livePath := func(key types.NamespacedName) string {
		return fmt.Sprintf("/apis/%s/namespaces/%s/projectmcps/%s", v1alpha1.GroupVersion, key.Namespace, key.Name)
	}
	start := time.Now()
	for range 200 {
		if status, _ := post(t, gw, nope, ""); status != http.StatusNotFound {
			t.Fatalf("a missing project: %d", status)
		}
	}
	const missTTL = 3 * time.Second
	if n, most := reqs.get(http.MethodGet, livePath(nope)), 2+int(time.Since(start)/missTTL); n > most {
		t.Fatalf("200 requests for a missing project cost %d live GETs in %s, want at most %d", n, time.Since(start).Round(time.Millisecond), most)
	}

	start = time.Now()
	codes, gets, retry := map[int]int{}, 0, ""
	for i := range 60 {
		key := types.NamespacedName{Namespace: authNamespace, Name: fmt.Sprintf("nope-%d", i)}
		status, after := post(t, gw, key, "")
		codes[status]++
		gets += reqs.get(http.MethodGet, livePath(key))
		if status == http.StatusTooManyRequests {
			retry = after
		}
	}
	// Each caller may confirm 10 misses at once and 2 a second.
	if most := 10 + 2*int(time.Since(start)/time.Second+1); gets > most || codes[http.StatusTooManyRequests] == 0 || retry == "" {
		t.Fatalf("60 missing names: %v, %d live GETs in %s (want at most %d), Retry-After %q", codes, gets, time.Since(start).Round(time.Millisecond), most, retry)
	}

	// Many callers, each within its own budget, are bounded together: 20 identities asking for
	// 10 missing names each (their burst) cost at most 50 live GETs at once and 20 a second.
	kgw := startGateway(t, env, &reqs, parseControllerFlags(t, "--gateway-auth", "kubernetes", "--gateway-new-token-reviews-per-source", "100"))
	tokens := lookupTokens(t, env, 20)
	start = time.Now()
	codes, gets = manyLookups(t, kgw, tokens, 10, func(key types.NamespacedName) int { return reqs.get(http.MethodGet, livePath(key)) })
	if most := 50 + 20*int(time.Since(start)/time.Second+1); gets > most || codes[http.StatusTooManyRequests] == 0 || codes[http.StatusNotFound] != gets {
		t.Fatalf("20 callers × 10 missing names: %v, %d live GETs in %s, want at most %d and 404 for each", codes, gets, time.Since(start).Round(time.Millisecond), most)
	}

	// No reconciler runs: a project the cache has waits for one for its readyTimeout, then 503.
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: nope.Name, Namespace: nope.Namespace},
		Spec: v1alpha1.ProjectMCPSpec{ReadyTimeout: &metav1.Duration{Duration: 100 * time.Millisecond},
			Servers: []v1alpha1.MCPServer{{Name: "s", Stdio: &v1alpha1.StdioServer{Command: "/bin/true"}}}}}
	env.DeleteOnCleanup(t, obj)
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the project created after its misses found", func() bool {
		status, _ := post(t, gw, nope, "")
		return status == http.StatusServiceUnavailable
	})
}

// lookupsNamespace holds the identities of TestGatewayMissingProjectLookups, each allowed to
// use every ProjectMCP there; kept afterwards, as authNamespace is.
const lookupsNamespace = "gateway-lookups"

// lookupTokens creates (once) n ServiceAccounts of lookupsNamespace allowed to use its
// ProjectMCPs and returns a token of each.
func lookupTokens(t *testing.T, env *testenv.Env, n int) []string {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lookupsNamespace}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "use", Namespace: lookupsNamespace}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"projectmcps"}, Verbs: []string{access.UseVerb}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "use", Namespace: lookupsNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "use"},
			Subjects: []rbacv1.Subject{{Kind: "Group", Name: "system:serviceaccounts:" + lookupsNamespace}}},
	}
	for i := range n {
		objs = append(objs, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("caller-%d", i), Namespace: lookupsNamespace}})
	}
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tokens := make([]string, n)
	for i := range n {
		tr, err := cs.CoreV1().ServiceAccounts(lookupsNamespace).CreateToken(ctx, fmt.Sprintf("caller-%d", i), &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = tr.Status.Token
	}
	return tokens
}

// manyLookups has each token ask for each missing names of its own at once, and returns the
// responses' codes and the live GETs they cost.
func manyLookups(t *testing.T, gw *gateway.Gateway, tokens []string, each int, gets func(types.NamespacedName) int) (map[int]int, int) {
	t.Helper()
	var mu sync.Mutex
	codes, keys := map[int]int{}, []types.NamespacedName{}
	var wg sync.WaitGroup
	for i, token := range tokens {
		wg.Go(func() {
			for j := range each {
				key := types.NamespacedName{Namespace: lookupsNamespace, Name: fmt.Sprintf("nope-%d-%d", i, j)}
				status, _, err := ping(gw, key, token)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				codes[status]++
				keys = append(keys, key)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	n := 0
	for _, key := range keys {
		n += gets(key)
	}
	return codes, n
}

// The gateway's review flags: audiences repeatable and comma-separated, and bad values refused
// naming the flag.
func TestGatewayReviewFlags(t *testing.T) {
	cs := &rest.Config{Host: "https://127.0.0.1:1"}
	a, err := parseControllerFlags(t, "--gateway-audience", "projectmcp,mcp.example.com", "--gateway-audience", "other",
		"--gateway-review-ttl", "5s", "--gateway-new-token-reviews", "10", "--gateway-new-token-reviews-per-source", "2").kubernetesAuth(cs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.Audiences, " ") != "projectmcp mcp.example.com other" || a.TTL != 5*time.Second || a.NewTokenRate != 10 || a.SourceRate != 2 {
		t.Fatalf("parsed %+v", a)
	}
	if a, err := parseControllerFlags(t).kubernetesAuth(cs); err != nil || len(a.Audiences) != 0 || a.NewTokenRate != access.DefaultNewTokenRate || a.SourceRate != access.DefaultSourceRate {
		t.Fatalf("defaults: %+v, %v", a, err)
	}
	for _, tc := range [][]string{
		{"--gateway-audience", "projectmcp,"},
		{"--gateway-audience", " projectmcp"},
		{"--gateway-review-ttl", "-1s"},
		{"--gateway-new-token-reviews", "-1"},
		{"--gateway-new-token-reviews-per-source", "-1"},
	} {
		if _, err := parseControllerFlags(t, tc...).kubernetesAuth(cs); err == nil || !strings.HasPrefix(err.Error(), tc[0]) {
			t.Errorf("%q: error %v, want one naming the flag", tc, err)
		}
	}
}
