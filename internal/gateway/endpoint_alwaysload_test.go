package gateway_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/projection"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// A server whose spec says alwaysLoad has each of its tools listed with
// _meta["anthropic/alwaysLoad"]: true, beside the tool's own _meta, on the project endpoint and
// on its own endpoint alike, whether the item goes raw (a session of the server's revision,
// whose fields no SDK type models are kept) or typed; the other server's tools are not marked.
// Each of a's tools is the same on both endpoints but for its name.
func TestGatewayAlwaysLoadMarksTools(t *testing.T) {
	ns := harness.NewNamespace(t)
	a := harness.FixtureServer(t, "a", "--future-fields", "--protocol", "2025-11-25")
	a.AlwaysLoad = true
	obj, own := beside(t, ns, "always", a)
	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(revision, func(t *testing.T) {
			project := listedTools(t, obj.Status.Endpoint, revision)
			server := listedTools(t, own, revision)
			ofA := map[string]map[string]any{}
			for name, tool := range project {
				raw, isA := strings.CutPrefix(name, "a__")
				if !isA {
					if _, marked := metaOf(tool)[projection.MetaAlwaysLoad]; marked {
						t.Errorf("%s is marked, though b's spec does not say alwaysLoad: %v", name, tool["_meta"])
					}
					continue
				}
				if metaOf(tool)[projection.MetaAlwaysLoad] != true {
					t.Errorf("%s on the project endpoint: _meta %v, want %s true", name, tool["_meta"], projection.MetaAlwaysLoad)
				}
				tool = maps.Clone(tool)
				tool["name"] = raw
				ofA[raw] = tool
			}
			if len(ofA) == 0 || len(ofA) != len(server) {
				t.Fatalf("a's tools: %d on the project endpoint, %d on its own", len(ofA), len(server))
			}
			for name, tool := range server {
				w, _ := json.Marshal(ofA[name])
				g, _ := json.Marshal(tool)
				if string(w) != string(g) {
					t.Errorf("%s: on a's endpoint %s, on the project endpoint (under a's name) %s", name, g, w)
				}
			}
			future := metaOf(server["future"])
			if future["fixture/future"] == nil || future[projection.MetaAlwaysLoad] != true {
				t.Errorf("future's own _meta and the mark, both: %v", future)
			}
			// a speaks 2025-11-25: its items go raw to a session of that revision only.
			if _, kept := server["future"]["futureItemField"]; kept != (revision == "2025-11-25") {
				t.Errorf("future's unmodeled field kept: %v, on a %s session", kept, revision)
			}
		})
	}
}

// listedTools are the tools of a tools/list through endpoint, as JSON objects by name, read off
// the wire (the SDK's types would drop the fields they do not model).
// beside makes project name of server a and a server b of the newest revision, both with fields
// no SDK type models, and returns it once Ready with its server endpoints, and a's endpoint.
func beside(t *testing.T, ns, name string, a v1alpha1.MCPServer) (*v1alpha1.ProjectMCP, string) {
	t.Helper()
	key := harness.Create(t, ns, name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		a, harness.FixtureServer(t, "b", "--future-fields", "--protocol", "2026-07-28")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready with server endpoints", func(o *v1alpha1.ProjectMCP) bool {
		return harness.IsReady(o) && o.Status.Endpoint != "" && len(o.Status.Servers) == 2 && o.Status.Servers[0].Endpoint != ""
	})
	return obj, v1alpha1.ServerEndpoint(obj.Status.Endpoint, "a")
}

func listedTools(t *testing.T, endpoint, revision string) map[string]map[string]any {
	t.Helper()
	version, header := revision, http.Header(nil)
	if revision == "2026-07-28" {
		version, header = "", http.Header{gateway.SessionHeader: {"always"}}
	}
	log := &wireLog{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "always", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: logged{log, header}}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return listItems(t, log.last(t), "tools", "name")
}

// metaOf is a listed item's _meta, nil when it has none.
func metaOf(item map[string]any) map[string]any {
	m, _ := item["_meta"].(map[string]any)
	return m
}
