package gateway

import (
	"os/exec"
	"strings"
	"testing"
)

// The gateway's rooms keep their walls: the request path never reaches the registry or the
// endpoint, access reaches neither the endpoint nor the request path, and the stream engine
// knows nothing of projectmcp. Each rule is checked on what the package depends on, directly
// or not (go list -deps).
func TestWalls(t *testing.T) {
	const module = "github.com/dsh-dev/projectmcp/"
	for _, c := range []struct {
		pkg       string
		forbidden []string // packages it must not depend on; "" forbids every package of the module
	}{
		{"internal/gateway/paths", []string{"internal/registry", "internal/gateway", "controllers"}},
		{"internal/gateway/access", []string{"internal/gateway", "internal/gateway/paths", "internal/registry"}},
		{"internal/httpserve", []string{""}},
		{"internal/revision", []string{""}},
	} {
		out, err := exec.Command("go", "list", "-deps", module+c.pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", c.pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			rel, ours := strings.CutPrefix(dep, module)
			if !ours || rel == c.pkg {
				continue
			}
			for _, f := range c.forbidden {
				if f == "" || rel == f {
					t.Errorf("%s depends on %s", c.pkg, rel)
				}
			}
		}
	}
}
