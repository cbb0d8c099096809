package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// NewNamespace creates a namespace of a generated name for a test, starting the API server
// and the controller first (NeedAPI). Every test that needs them calls it first.
func NewNamespace(t testing.TB) string {
	t.Helper()
	NeedAPI(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pmcp-"}}
	if err := Env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// FixtureServer is a stdio server running this test binary as the fixture, writing its pids to
// a file named after the server.
func FixtureServer(t testing.TB, name string, args ...string) v1alpha1.MCPServer {
	t.Helper()
	pidFile := filepath.Join(pidDir, fmt.Sprintf("%s-%s-%d.json", strings.ReplaceAll(t.Name(), "/", "_"), name, time.Now().UnixNano()))
	return v1alpha1.MCPServer{Name: name, Stdio: &v1alpha1.StdioServer{
		Command: os.Args[0],
		Args:    append([]string{"--name", name, "--pid-file", pidFile}, args...),
		Env:     []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}},
	}}
}

// HTTPFixture starts a fixture process serving streamable HTTP (stateful, so 2025-11-25),
// its log going to the controller's log as a stdio server's stderr does.
func HTTPFixture(t testing.TB, name string, args ...string) v1alpha1.MCPServer {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"--http", "127.0.0.1:0", "--name", name}, args...)...)
	cmd.Env = append(os.Environ(), fixture.EnvVar+"=1")
	cmd.Stderr = Logs
	return v1alpha1.MCPServer{Name: name, HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTPProcess(t, cmd) + "/mcp"}}
}

// PIDFileOf is the pid file of a FixtureServer.
func PIDFileOf(s v1alpha1.MCPServer) string {
	for i, a := range s.Stdio.Args {
		if a == "--pid-file" {
			return s.Stdio.Args[i+1]
		}
	}
	return ""
}

// ReadPIDs reads the pids the fixture of a server wrote at its latest start.
func ReadPIDs(t testing.TB, s v1alpha1.MCPServer) fixture.PIDs {
	t.Helper()
	var p fixture.PIDs
	testutil.Eventually(t, 10*time.Second, "the fixture's pid file", func() bool {
		data, err := os.ReadFile(PIDFileOf(s))
		return err == nil && json.Unmarshal(data, &p) == nil && p.PID > 0
	})
	return p
}

// Create creates a ProjectMCP, deleted (and waited for) when the test ends.
func Create(t testing.TB, ns, name string, spec v1alpha1.ProjectMCPSpec) types.NamespacedName {
	t.Helper()
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	if err := Env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(obj)
	t.Cleanup(func() { DeleteAndWait(t, key) })
	return key
}

// Get reads a ProjectMCP.
func Get(t testing.TB, key types.NamespacedName) *v1alpha1.ProjectMCP {
	t.Helper()
	obj := &v1alpha1.ProjectMCP{}
	if err := Env.Client.Get(context.Background(), key, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// Update applies f to the latest object, retrying on conflicts.
func Update(t testing.TB, key types.NamespacedName, f func(*v1alpha1.ProjectMCP)) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "an update without conflict", func() bool {
		obj := Get(t, key)
		f(obj)
		return Env.Client.Update(context.Background(), obj) == nil
	})
}

// DeleteAndWait deletes a ProjectMCP, if it is there, and waits until it is gone.
func DeleteAndWait(t testing.TB, key types.NamespacedName) {
	obj := &v1alpha1.ProjectMCP{}
	if err := Env.Client.Get(context.Background(), key, obj); err != nil {
		return
	}
	_ = Env.Client.Delete(context.Background(), obj)
	testutil.Eventually(t, 30*time.Second, "the object to be deleted", func() bool {
		return Env.Client.Get(context.Background(), key, &v1alpha1.ProjectMCP{}) != nil
	})
}

// ServerStatusOf is a server's entry in the object's status.
func ServerStatusOf(obj *v1alpha1.ProjectMCP, name string) (v1alpha1.ServerStatus, bool) {
	for _, s := range obj.Status.Servers {
		if s.Name == name {
			return s, true
		}
	}
	return v1alpha1.ServerStatus{}, false
}

// WaitStatus waits until cond holds for the object's status and returns the object.
func WaitStatus(t testing.TB, key types.NamespacedName, timeout time.Duration, what string, cond func(*v1alpha1.ProjectMCP) bool) *v1alpha1.ProjectMCP {
	t.Helper()
	var obj *v1alpha1.ProjectMCP
	testutil.Eventually(t, timeout, what, func() bool {
		obj = &v1alpha1.ProjectMCP{}
		if err := Env.Client.Get(context.Background(), key, obj); err != nil {
			return false // not created yet, e.g. by the mirror
		}
		return cond(obj)
	})
	return obj
}

// IsReady reports whether the object is Ready for its current generation.
func IsReady(obj *v1alpha1.ProjectMCP) bool {
	for _, c := range obj.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c.Status == metav1.ConditionTrue && obj.Status.ObservedGeneration == obj.Generation
		}
	}
	return false
}

// PhaseIs is a WaitStatus condition: the server is in the phase.
func PhaseIs(name string, phase v1alpha1.ServerPhase) func(*v1alpha1.ProjectMCP) bool {
	return func(obj *v1alpha1.ProjectMCP) bool {
		s, ok := ServerStatusOf(obj, name)
		return ok && s.Phase == phase
	}
}
