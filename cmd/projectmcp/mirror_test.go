package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// Several --project flags mirror several projects, each into its own object named after its
// folder.
func TestMirrorSeveralProjects(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- mirrorProjects(ctx, env.Kubeconfig, []string{filepath.Join(root, "web-app"), filepath.Join(root, "API")}, "", "default")
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for name, cmd := range map[string]string{"web-app": "npx", "api": "uvx"} {
		obj := &v1alpha1.ProjectMCP{}
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, obj)
			if err == nil && len(obj.Spec.Servers) == 1 && obj.Spec.Servers[0].Stdio.Command == cmd {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("projectmcp %s not mirrored: %v %+v", name, err, obj.Spec)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
