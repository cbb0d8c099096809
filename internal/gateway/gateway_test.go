package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// What an agent may write into status is bounded: a stateless session header that is too
// long or has odd characters is refused with 400 before anything else; a long client name is
// cut.
func TestSessionNamesBounded(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	g := New(Options{Registry: reg})
	post := func(header string) int {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/projects/ns/p/mcp", strings.NewReader("{}"))
		r = ownLoopback(r)
		r.Header.Set(SessionHeader, header)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w.Code
	}
	for name, h := range map[string]string{"too long": strings.Repeat("a", paths.MaxSessionName+1), "a space": "a b", "a newline": "a\nb", "non-ASCII": "é"} {
		if code := post(h); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, code)
		}
	}
	if code := post("agent-1:x@y.z"); code != http.StatusNotFound { // valid; the project does not exist
		t.Errorf("a valid header: %d, want 404", code)
	}
	long := strings.Repeat("é", paths.MaxSessionName)
	name := func(n string) string {
		return clientName(&mcp.InitializeRequest{Params: &mcp.InitializeParams{ClientInfo: &mcp.Implementation{Name: n, Version: "1"}}})
	}
	got := name(long)
	head, sum, cut := strings.Cut(got, "~")
	if len(got) > paths.MaxSessionName || !cut || len(sum) != 8 || !strings.HasPrefix(long, head) || !utf8.ValidString(got) {
		t.Errorf("client name %d bytes: %q", len(got), got)
	}
	if other := name(long + "x"); other == got || len(other) > paths.MaxSessionName {
		t.Errorf("two long names that share a beginning must stay apart: %q, %q", got, other)
	}
	if short := name("claude-code"); short != "claude-code/1" {
		t.Errorf("a short name is kept: %q", short)
	}
}

// A request for a project that exists but is not set up waits for its first reconcile within
// readyTimeout: 503 with Retry-After when it does not come; 404 at once for a project being
// deleted; served (neither) once the reconciler sets it up meanwhile.
func TestAwaitProject(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	objs := []client.Object{
		&v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "slow"},
			Spec: v1alpha1.ProjectMCPSpec{ReadyTimeout: &metav1.Duration{Duration: 200 * time.Millisecond}}},
		&v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "later"},
			Spec: v1alpha1.ProjectMCPSpec{ReadyTimeout: &metav1.Duration{Duration: 10 * time.Second}}},
		&v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "going", DeletionTimestamp: &now, Finalizers: []string{"x"}}},
	}
	objects := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	g := New(Options{Registry: reg, Objects: objects})
	defer g.shutdown()
	post := func(name string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/projects/ns/"+name+"/mcp", strings.NewReader("{}"))
		r = ownLoopback(r)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	if w := post("slow"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("not set up within readyTimeout: %d (Retry-After %q), want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if w := post("going"); w.Code != http.StatusNotFound {
		t.Errorf("a project being deleted: %d, want 404", w.Code)
	}
	if w := post("absent"); w.Code != http.StatusNotFound {
		t.Errorf("a project that does not exist: %d, want 404", w.Code)
	}
	time.AfterFunc(100*time.Millisecond, func() {
		reg.SetDesired(types.NamespacedName{Namespace: "ns", Name: "later"}, registry.Desired{})
	})
	if w := post("later"); w.Code == http.StatusNotFound || w.Code == http.StatusServiceUnavailable {
		t.Errorf("a project set up while the request waited must be served: %d %s", w.Code, w.Body)
	}
}
