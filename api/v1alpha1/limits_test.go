package v1alpha1

import (
	"os"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// The validation markers repeat the limit constants as literals; this test keeps them equal, so
// that a config file the parser accepts is never refused by the API server.
func TestCRDLimitsMatchConstants(t *testing.T) {
	data, err := os.ReadFile("../../config/crd/bases/mcp.dsh.dev_projectmcps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		t.Fatal(err)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	at := func(path ...string) apiextensionsv1.JSONSchemaProps {
		s := *root
		for _, p := range path {
			if p == "[]" {
				s = *s.Items.Schema
				continue
			}
			next, ok := s.Properties[p]
			if !ok {
				t.Fatalf("no property %q in %v", p, path)
			}
			s = next
		}
		return s
	}
	server := []string{"spec", "servers", "[]"}
	sub := func(p ...string) []string { return append(append([]string{}, server...), p...) }
	checks := []struct {
		name string
		got  *int64
		want int
	}{
		{"servers maxItems", at("spec", "servers").MaxItems, MaxServers},
		{"server name maxLength", at(sub("name")...).MaxLength, MaxServerNameLength},
		{"args maxItems", at(sub("stdio", "args")...).MaxItems, MaxArgs},
		{"arg maxLength", at(sub("stdio", "args", "[]")...).MaxLength, MaxArgLength},
		{"command maxLength", at(sub("stdio", "command")...).MaxLength, MaxArgLength},
		{"workingDir maxLength", at(sub("stdio", "workingDir")...).MaxLength, MaxArgLength},
		{"env maxItems", at(sub("stdio", "env")...).MaxItems, MaxEnvVars},
		{"env name maxLength", at(sub("stdio", "env", "[]", "name")...).MaxLength, MaxEnvNameLength},
		{"env value maxLength", at(sub("stdio", "env", "[]", "value")...).MaxLength, MaxArgLength},
		{"headers maxItems", at(sub("http", "headers")...).MaxItems, MaxEnvVars},
		{"url maxLength", at(sub("http", "url")...).MaxLength, MaxURLLength},
		{"allow maxItems", at(sub("tools", "allow")...).MaxItems, MaxToolPatterns},
		{"deny pattern maxLength", at(sub("tools", "deny", "[]")...).MaxLength, MaxToolPatternLength},
		{"toolHints maxItems", at(sub("toolHints")...).MaxItems, MaxToolHints},
		{"toolHints glob maxLength", at(sub("toolHints", "[]", "tools")...).MaxLength, MaxToolHintGlob},
		{"toolHints meta maxProperties", at(sub("toolHints", "[]", "meta")...).MaxProperties, MaxToolHintMeta},
		{"toolHints description maxLength", at(sub("toolHints", "[]", "description")...).MaxLength, MaxToolHintDescription},
		{"toolHints title maxLength", at(sub("toolHints", "[]", "annotations", "title")...).MaxLength, MaxToolHintTitle},
		{"status tools maxItems", at("status", "servers", "[]", "tools").MaxItems, MaxStatusTools},
		{"status sessions maxItems", at("status", "sessions").MaxItems, MaxStatusSessions},
		{"lastError maxLength", at("status", "servers", "[]", "lastError").MaxLength, MaxErrorLength},
	}
	for _, c := range checks {
		if c.got == nil || *c.got != int64(c.want) {
			t.Errorf("%s: CRD has %v, constant is %d", c.name, c.got, c.want)
		}
	}
	if p := at(sub("name")...).Pattern; p != ServerNamePattern {
		t.Errorf("server name pattern: CRD has %q, constant is %q", p, ServerNamePattern)
	}
}
