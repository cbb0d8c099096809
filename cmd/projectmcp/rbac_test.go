package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// The generated RBAC is enough: the controller runs as its ServiceAccount (impersonated) with
// leader election, finalizers, status, events, Secrets, TokenReview and the allowlist, and a
// ProjectMCP reaches Ready; a command outside the allowlist is refused in status. And it is no
// more than that for Leases: the ServiceAccount may not write one outside its own namespace,
// where the bucket Leases are.
func TestGeneratedRBACSuffices(t *testing.T) {
	env := apiServer(t)
	ctx := context.Background()
	// Kept afterwards: envtest never finishes deleting a namespace.
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "projectmcp-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	root, _ := testenv.RepoRoot()
	for _, f := range []string{"role.yaml", "role_binding.yaml", "service_account.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "config", "rbac", f))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			env.DeleteOnCleanup(t, u)
			if err := env.Client.Create(ctx, u); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tokens", Namespace: "default",
		Annotations: map[string]string{v1alpha1.AnnotationAllowedProjects: "rbac", v1alpha1.AnnotationAllowedDestinations: os.Args[0]}},
		StringData: map[string]string{"T": "x"}}
	env.DeleteOnCleanup(t, secret)
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:projectmcp-system:projectmcp-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:projectmcp-system", "system:authenticated"},
	}
	f := controllerFlags{
		metricsAddr: "0", probeAddr: "0", leaderElect: true, leaderElectNS: "projectmcp-system", buckets: 4,
		leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, retryPeriod: 500 * time.Millisecond, handoffTimeout: 10 * time.Second,
		gatewayAddr: "127.0.0.1:0", gatewayAuth: "kubernetes", allowCommands: []string{os.Args[0]},
		conn:           conn.Settings{ConnectTimeout: 10 * time.Second, HealthInterval: 15 * time.Second, RelistInterval: time.Minute},
		sessionTimeout: time.Minute, statelessIdle: time.Minute, maxBodyBytes: 1 << 20,
	}
	mgr, gw, err := newManager(cfg, &f)
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	obj := &v1alpha1.ProjectMCP{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac", Namespace: "default"},
		Spec: v1alpha1.ProjectMCPSpec{
			SecretRef: &corev1.LocalObjectReference{Name: "tokens"},
			Reconnect: &v1alpha1.ReconnectPolicy{},
			Servers: []v1alpha1.MCPServer{
				{Name: "ok", Stdio: &v1alpha1.StdioServer{Command: os.Args[0],
					Env: []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}, {Name: "T", Value: "${T}"}}}},
				{Name: "shell", Stdio: &v1alpha1.StdioServer{Command: "/bin/sh", Args: []string{"-c", "true"}}},
			},
		},
	}
	env.DeleteOnCleanup(t, obj)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyOK(t, 60*time.Second, "the controller, as the ServiceAccount, to reach Ready and refuse the shell", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		var okReady, shellRefused bool
		for _, s := range obj.Status.Servers {
			okReady = okReady || (s.Name == "ok" && s.Phase == v1alpha1.PhaseReady)
			shellRefused = shellRefused || (s.Name == "shell" && s.Phase == v1alpha1.PhaseFailed && strings.Contains(s.LastError, "not allowed"))
		}
		if okReady && shellRefused && obj.Status.Endpoint == gw.Endpoint(client.ObjectKeyFromObject(obj)) {
			return nil
		}
		return fmt.Errorf("status %+v", obj.Status)
	})
	if len(obj.Finalizers) == 0 {
		t.Fatal("the finalizer must be set (update permission)")
	}

	as, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"default", "kube-system"} {
		forged := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "projectmcp-bucket-0", Namespace: ns}}
		if err := as.Create(ctx, forged); !apierrors.IsForbidden(err) {
			_ = env.Client.Delete(ctx, forged)
			t.Errorf("the controller's ServiceAccount creating a Lease in %s: %v, want forbidden", ns, err)
		}
	}
}
