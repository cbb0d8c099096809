package gateway

import (
	"slices"
	"strings"
	"testing"
)

func TestResourceNames(t *testing.T) {
	for _, tc := range []struct {
		item Item
		want []string
	}{
		{Item{Resource: ResourceTools, Server: "github", Name: "create_issue"},
			[]string{"shop/*", "shop/github__*", "shop/github__create_issue"}},
		{Item{Resource: ResourcePrompts, Server: "a", Name: "greet"},
			[]string{"shop/*", "shop/a__*", "shop/a__greet"}},
		{Item{Resource: ResourceResources, Server: "fs", Name: "file:///etc/hosts"},
			[]string{"shop/*", "shop/fs__*", "shop/file:///etc/hosts"}},
		{Item{Resource: ResourceResources, Server: "fs", Name: "file:///x/{id}"}, // a template, as listed
			[]string{"shop/*", "shop/fs__*", "shop/file:///x/{id}"}},
		// A URI read through a template is granted by the template: the reviewed names are
		// the catalog's, whatever URIs a caller makes up.
		{Item{Resource: ResourceResources, Server: "fs", Name: "file:///x/1", Template: "file:///x/{id}", Unlisted: true},
			[]string{"shop/*", "shop/fs__*", "shop/file:///x/{id}"}},
		// Names no list holds (a per-server endpoint passes them on): the wildcards alone.
		{Item{Resource: ResourceTools, Server: "a", Name: "made_up_1", Unlisted: true}, []string{"shop/*", "shop/a__*"}},
		{Item{Resource: ResourceResources, Server: "a", Name: "secret://x", Unlisted: true}, []string{"shop/*", "shop/a__*"}},
		// A listed "URI" without a scheme never reads as another grant (shop/github__*).
		{Item{Resource: ResourceResources, Server: "a", Name: "github__*"}, []string{"shop/*", "shop/a__*"}},
		{Item{Resource: ResourceResources, Server: "a", Name: "*"}, []string{"shop/*", "shop/a__*"}},
		{Item{Resource: ResourceResources, Server: "a", Name: "x", Template: "{x}", Unlisted: true}, []string{"shop/*", "shop/a__*"}},
	} {
		if got := ResourceNames("shop", tc.item); !slices.Equal(got, tc.want) {
			t.Errorf("ResourceNames(%+v) = %q, want %q", tc.item, got, tc.want)
		}
	}
}

// A refusal names what would grant the use, in the words a Role is written in.
func TestDeniedItemSaysWhatGrants(t *testing.T) {
	msg := (&deniedItem{project: "shop", item: Item{Resource: ResourceTools, Server: "deploy", Name: "rollout"}}).Error()
	for _, want := range []string{`tool "rollout"`, `server "deploy"`, `"call"`, "tools.mcp.dsh.dev", `"shop/deploy__rollout"`, `"shop/deploy__*"`, `"shop/*"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %s", msg, want)
		}
	}
}

func TestHasScheme(t *testing.T) {
	for s, want := range map[string]bool{
		"file:///x": true, "fixture://a/readme": true, "urn:isbn:1": true, "git+ssh://h/r": true, "a1.-+:x": true,
		"": false, "github__*": false, "*": false, ":x": false, "1abc:x": false, "a b:x": false, "/x:y": false,
	} {
		if got := hasScheme(s); got != want {
			t.Errorf("hasScheme(%q) = %v", s, got)
		}
	}
}
