package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// A remote server's headersHelper is run by the controller: the server, which checks bearer
// tokens, refuses the helper's first one, and the helper's second connects it. Its tokens
// appear in no status, event or log line of the controller's.
func TestHeadersHelperRunByTheController(t *testing.T) {
	ns := harness.NewNamespace(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("hh-token-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(dir, "helper.sh")
	script := fmt.Sprintf(`#!/bin/sh
n=$(( $(cat %[1]s/count 2>/dev/null || echo 0) + 1 ))
echo $n > %[1]s/count
printf '{"Authorization": "Bearer hh-token-%%d"}' $n
`, dir)
	if err := os.WriteFile(helper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	url := fixture.StartHTTP(t, "--bearer-file", tokens) + "/mcp"
	key := harness.Create(t, ns, "helped", v1alpha1.ProjectMCPSpec{
		Reconnect: &v1alpha1.ReconnectPolicy{
			MaxAttempts:    ptr.To[int32](3),
			InitialBackoff: &metav1.Duration{Duration: 200 * time.Millisecond},
			MaxBackoff:     &metav1.Duration{Duration: time.Second},
		},
		Servers: []v1alpha1.MCPServer{{Name: "api", HTTP: &v1alpha1.HTTPServer{URL: url, HeadersHelper: helper}}},
	})
	ready := harness.WaitStatus(t, key, 30*time.Second, "api Ready with the helper's second token", harness.PhaseIs("api", v1alpha1.PhaseReady))
	if count, _ := os.ReadFile(filepath.Join(dir, "count")); strings.TrimSpace(string(count)) != "2" {
		t.Fatalf("the helper ran %q times, want 2 (the first token refused)", count)
	}
	status, _ := json.Marshal(ready.Status)
	evs := &eventsv1.EventList{}
	if err := harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	events, _ := json.Marshal(evs.Items)
	for what, text := range map[string]string{"status": string(status), "events": string(events), "logs": harness.Logs.String()} {
		if strings.Contains(text, "hh-token") {
			t.Errorf("a helper's token is in the %s", what)
		}
	}
}
