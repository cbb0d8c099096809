package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The four lists reach a session with their items as the server listed them, fields no SDK
// type models included, when the session and the server speak the same revision: each item
// through the endpoint is, as a JSON value, the item the server sends a direct session, under
// its projected name for tools and prompts (their _meta as listed), whole for resources and
// templates. A session of the
// other revision gets the SDK's typed items, as it does the results of requests: each project
// also has a server "b" speaking the revision "a" does not, whose items in the same pages are
// typed exactly when a's are raw.
func TestGatewayListsKeepUnmodeledFields(t *testing.T) {
	cases := map[string]struct {
		session, server string
		kept            bool // the unmodeled fields reach the session
	}{
		"2025-11-25":                      {"2025-11-25", "2025-11-25", true},
		"2026-07-28":                      {"2026-07-28", "2026-07-28", true},
		"2025-11-25 session, 2026 server": {"2025-11-25", "2026-07-28", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := []string{"--future-fields", "--protocol", tc.server}
			other := map[string]string{"2025-11-25": "2026-07-28", "2026-07-28": "2025-11-25"}[tc.server]
			ns := harness.NewNamespace(t)
			key := harness.Create(t, ns, "lists", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
				harness.FixtureServer(t, "a", args...), harness.FixtureServer(t, "b", "--future-fields", "--protocol", other)}})
			harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
			d, direct := directLogged(t, tc.server, append([]string{"--name", "a"}, args...)...)
			s, through := endpointLogged(t, key, tc.session)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			for _, l := range []struct {
				field, key string
				projected  bool // named by the projection
				direct, gw func() error
			}{
				{"tools", "name", true,
					func() error { _, err := d.ListTools(ctx, nil); return err },
					func() error { _, err := s.ListTools(ctx, nil); return err }},
				{"prompts", "name", true,
					func() error { _, err := d.ListPrompts(ctx, nil); return err },
					func() error { _, err := s.ListPrompts(ctx, nil); return err }},
				{"resources", "uri", false,
					func() error { _, err := d.ListResources(ctx, nil); return err },
					func() error { _, err := s.ListResources(ctx, nil); return err }},
				{"resourceTemplates", "uriTemplate", false,
					func() error { _, err := d.ListResourceTemplates(ctx, nil); return err },
					func() error { _, err := s.ListResourceTemplates(ctx, nil); return err }},
			} {
				if err := l.direct(); err != nil {
					t.Fatalf("%s directly: %v", l.field, err)
				}
				if err := l.gw(); err != nil {
					t.Fatalf("%s through the endpoint: %v", l.field, err)
				}
				want, got := listItems(t, direct.last(t), l.field, l.key), listItems(t, through.last(t), l.field, l.key)
				ofA := 0
				for key := range got {
					if strings.HasPrefix(key, "a__") || strings.HasPrefix(key, "fixture://a/") {
						ofA++
					}
				}
				if ofA != len(want) {
					t.Fatalf("%s: %d items of a through the endpoint, %d directly", l.field, ofA, len(want))
				}
				for key, item := range want {
					if l.projected {
						key = "a__" + key
						item["name"] = key
					}
					if !tc.kept {
						delete(item, "futureItemField")
					}
					w, _ := json.Marshal(item)
					g, _ := json.Marshal(got[key])
					if string(g) != string(w) {
						t.Errorf("%s %s: through the endpoint %s, directly (as the endpoint names it) %s", l.field, key, g, w)
					}
				}
				future := map[string]string{"tools": "a__future", "prompts": "a__future",
					"resources": "fixture://a/future", "resourceTemplates": "fixture://a/future/{id}"}[l.field]
				if _, kept := got[future]["futureItemField"]; kept != tc.kept {
					t.Errorf("%s: the unmodeled field through the endpoint: %v, want %v", l.field, kept, tc.kept)
				}
				futureB := strings.Replace(strings.Replace(future, "a__", "b__", 1), "://a/", "://b/", 1)
				if _, kept := got[futureB]["futureItemField"]; kept != (other == tc.session) {
					t.Errorf("%s: b's unmodeled field through the endpoint: %v, want %v", l.field, kept, other == tc.session)
				}
			}
		})
	}
}

// listItems are a list result's items by their key member.
func listItems(t *testing.T, result, field, key string) map[string]map[string]any {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(result), &top); err != nil {
		t.Fatal(err)
	}
	var items []map[string]any
	if err := json.Unmarshal(top[field], &items); err != nil {
		t.Fatalf("%s in %s: %v", field, result, err)
	}
	out := map[string]map[string]any{}
	for _, it := range items {
		k, _ := it[key].(string)
		out[k] = it
	}
	return out
}
