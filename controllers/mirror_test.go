package controllers_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/mirror"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// fixtureEntry is a .dsh/mcp.json server entry running the fixture.
func fixtureEntry(name string) map[string]any {
	return map[string]any{"command": os.Args[0], "args": []string{"--name", name}, "env": map[string]string{fixture.EnvVar: "1"}}
}

func writeConfig(t *testing.T, dir string, servers map[string]any) {
	t.Helper()
	data, _ := json.MarshalIndent(map[string]any{"mcpServers": servers}, "", "  ")
	writeRaw(t, dir, string(data))
}

// writeRaw replaces the file the way many editors save: write a temporary file, rename it over.
func writeRaw(t *testing.T, dir, content string) {
	t.Helper()
	tmp := filepath.Join(dir, ".dsh", ".mcp.json.swp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ".dsh", "mcp.json")); err != nil {
		t.Fatal(err)
	}
}

func synced(o *v1alpha1.ProjectMCP) *metav1.Condition {
	return meta.FindStatusCondition(o.Status.Conditions, v1alpha1.ConditionConfigSynced)
}

// The mirror applies the file, follows edits (including rename-replace saves) to live
// sessions, keeps the last good spec on invalid input with a positioned ConfigSynced=False,
// recovers when the file is fixed, and retires everything when the file is deleted.
func TestMirror(t *testing.T) {
	ns := harness.NewNamespace(t)
	dir := filepath.Join(t.TempDir(), "My Project")
	if err := os.MkdirAll(filepath.Join(dir, ".dsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, dir, map[string]any{"a": fixtureEntry("a")})
	key := types.NamespacedName{Namespace: ns, Name: config.NameFor(filepath.Join(dir, config.DefaultPath))}
	if key.Name != "my-project" {
		t.Fatalf("name from the folder: %q", key.Name)
	}
	// The controller runs on this machine, as with projectmcp dev: the folder's path is published.
	m := &mirror.Mirror{Client: harness.Env.Client, Dir: dir, Key: key, Log: ctrl.Log.WithName("mirror"), PublishPath: true}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	t.Cleanup(func() { harness.DeleteAndWait(t, key) })

	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready and synced", func(o *v1alpha1.ProjectMCP) bool {
		c := synced(o)
		return harness.IsReady(o) && c != nil && c.Status == metav1.ConditionTrue
	})
	first, _ := harness.ServerStatusOf(obj, "a")
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)

	// An edit reaches the live session.
	writeConfig(t, dir, map[string]any{"a": fixtureEntry("a"), "b": fixtureEntry("b")})
	ag.WaitTools(t, "b's tools after the edit", harness.Has("b__echo"))

	// Invalid files never replace the last good spec.
	gen := harness.Get(t, key).Generation
	for name, bad := range map[string]string{
		"unknown key":    "{\"mcpServers\": {\"a\": {\n  \"comand\": \"x\"}}}",
		"trailing comma": `{"mcpServers": {},}`,
		"not JSON":       `mcpServers: []`,
	} {
		writeRaw(t, dir, bad)
		o := harness.WaitStatus(t, key, 10*time.Second, "ConfigSynced=False for "+name, func(o *v1alpha1.ProjectMCP) bool {
			c := synced(o)
			return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, config.DefaultPath+":")
		})
		c := synced(o)
		if c.Reason != v1alpha1.ReasonConfigInvalid || o.Generation != gen {
			t.Fatalf("%s: reason %s, generation %d → %d", name, c.Reason, gen, o.Generation)
		}
		if s, _ := harness.ServerStatusOf(o, "a"); s.Connection != first.Connection {
			t.Fatalf("%s: the running connection must be left alone", name)
		}
	}
	assertEvent(t, ns, v1alpha1.ReasonConfigInvalid)
	if msg := synced(harness.Get(t, key)).Message; !strings.Contains(msg, ".dsh/mcp.json:1:") {
		t.Fatalf("the message must carry line and column: %q", msg)
	}

	// Fixing the file restores ConfigSynced=True.
	writeConfig(t, dir, map[string]any{"a": fixtureEntry("a")})
	harness.WaitStatus(t, key, 10*time.Second, "ConfigSynced=True again", func(o *v1alpha1.ProjectMCP) bool {
		c := synced(o)
		return c != nil && c.Status == metav1.ConditionTrue && len(o.Spec.Servers) == 1
	})
	ag.WaitTools(t, "b's tools gone", harness.HasNot("b__echo"))

	// render and mirror produce the same spec for the same file.
	data, _ := os.ReadFile(m.Path())
	rendered, err := config.Parse(config.DefaultPath, data)
	if err != nil {
		t.Fatal(err)
	}
	rendered.Project = dir
	applied := harness.Get(t, key).Spec
	applied.IdleTimeout, applied.ReadyTimeout = nil, nil // API defaults, not from the file
	if d := cmp.Diff(rendered.Servers, applied.Servers); d != "" || applied.Project != rendered.Project {
		t.Fatalf("mirror and render differ (-render +mirror):\n%s", d)
	}

	// Deleting the file retires every server; recreating it brings them back.
	if err := os.Remove(m.Path()); err != nil {
		t.Fatal(err)
	}
	harness.WaitStatus(t, key, 10*time.Second, "no servers", func(o *v1alpha1.ProjectMCP) bool { return len(o.Status.Servers) == 0 && len(o.Spec.Servers) == 0 })
	ag.WaitTools(t, "no tools", func(names []string) bool { return len(names) == 0 })
	writeConfig(t, dir, map[string]any{"a": fixtureEntry("a")})
	ag.WaitTools(t, "a's tools back", harness.Has("a__echo"))
	if !slices.Contains(ag.Tools(t), "a__echo") {
		t.Fatal("a must be back")
	}
}
