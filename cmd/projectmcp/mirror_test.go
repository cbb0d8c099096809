package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// Several --project flags mirror several projects, each into its own object named after its
// folder.
func TestMirrorSeveralProjects(t *testing.T) {
	env := apiServer(t)
	root := t.TempDir()
	for name, cmd := range map[string]string{"web-app": "npx", "API": "uvx"} {
		if err := os.MkdirAll(filepath.Join(root, name, ".dsh"), 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := `{"mcpServers": {"s": {"command": "` + cmd + `"}}}`
		if err := os.WriteFile(filepath.Join(root, name, ".dsh", "mcp.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mirrored := map[string]string{"web-app": "npx", "api": "uvx"}
	for name := range mirrored {
		env.DeleteOnCleanup(t, &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- mirrorProjects(ctx, env.Kubeconfig, []string{filepath.Join(root, "web-app"), filepath.Join(root, "API")}, "", "default", false)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for name, cmd := range mirrored {
		obj := &v1alpha1.ProjectMCP{}
		testutil.EventuallyOK(t, 20*time.Second, "projectmcp "+name+" mirrored", func() error {
			err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, obj)
			// spec.project stays empty: the path is published only with --publish-project-path.
			if err == nil && len(obj.Spec.Servers) == 1 && obj.Spec.Servers[0].Stdio.Command == cmd && obj.Spec.Project == "" {
				return nil
			}
			return fmt.Errorf("%v %+v", err, obj.Spec)
		})
	}
}
