package gateway_test

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// A server's toolHints show on the tools their globs match, on the project endpoint and on the
// server's own endpoint alike, whether the item goes raw (a session of the server's revision)
// or typed: the hint's _meta beside the tool's own, the description replaced, the annotations
// overridden. Later entries win per key; unmatched tools and the other server's are as listed.
func TestGatewayToolHintsShowOnBothEndpoints(t *testing.T) {
	ns := harness.NewNamespace(t)
	a := harness.FixtureServer(t, "a", "--future-fields", "--protocol", "2025-11-25")
	yes := true
	title, hinted := "Hinted", "hinted description"
	a.ToolHints = []v1alpha1.ToolHint{
		{Tools: "*", Meta: map[string]apiextensionsv1.JSON{"anthropic/maxResultSizeChars": {Raw: []byte("1000")}}},
		{Tools: "f*", Description: &hinted, Annotations: &v1alpha1.ToolAnnotations{Title: &title, ReadOnlyHint: &yes},
			Meta: map[string]apiextensionsv1.JSON{"anthropic/maxResultSizeChars": {Raw: []byte("500000")}}},
	}
	obj, own := beside(t, ns, "hinted", a)
	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(revision, func(t *testing.T) {
			project := listedTools(t, obj.Status.Endpoint, revision)
			server := listedTools(t, own, revision)
			ofA := map[string]map[string]any{}
			for name, tool := range project {
				raw, isA := strings.CutPrefix(name, "a__")
				if !isA {
					if _, hinted := metaOf(tool)["anthropic/maxResultSizeChars"]; hinted {
						t.Errorf("%s carries a's hint: %v", name, tool["_meta"])
					}
					continue
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
				checkHinted(t, name, tool)
			}
			future := server["future"]
			if metaOf(future)["fixture/future"] == nil {
				t.Errorf("future lost its own _meta: %v", future["_meta"])
			}
			if _, kept := future["futureItemField"]; kept != (revision == "2025-11-25") {
				t.Errorf("future's unmodeled field kept: %v, on a %s session", kept, revision)
			}
		})
	}
}

// checkHinted checks one of a's listed tools against the hints TestGatewayToolHintsShowOnBothEndpoints gives.
func checkHinted(t *testing.T, name string, tool map[string]any) {
	t.Helper()
	size := metaOf(tool)["anthropic/maxResultSizeChars"]
	annotations, _ := tool["annotations"].(map[string]any)
	if !strings.HasPrefix(name, "f") {
		if size != float64(1000) || tool["description"] == "hinted description" || annotations["title"] == "Hinted" {
			t.Errorf("%s: only the first hint applies, got %v", name, tool)
		}
		return
	}
	if size != float64(500000) || tool["description"] != "hinted description" ||
		annotations["title"] != "Hinted" || annotations["readOnlyHint"] != true {
		t.Errorf("%s: both hints apply, the later winning, got %v", name, tool)
	}
}
