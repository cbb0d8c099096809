package sandbox

import (
	"fmt"
	"path/filepath"
	"strings"
)

// Wants are a server's own sandbox settings: its entry's "sandbox" (VS Code's keys).
type Wants struct {
	// Off runs the server outside the sandbox ("sandbox": false).
	Off bool
	// AllowWrite are paths the server may write besides its HOME and /tmp; DenyRead paths it
	// may not see; DenyWrite paths it may not write even inside those. Each is absolute, or
	// begins with "~/" (the server's HOME) or "${workspaceFolder}" (the project's folder).
	AllowWrite, DenyRead, DenyWrite []string
	// AllowedDomains and DeniedDomains bound where its proxy connects (policy.Domains).
	AllowedDomains, DeniedDomains []string
}

// workspaceVar is VS Code's name for the project's folder in a path.
const workspaceVar = "${workspaceFolder}"

// Resolve is each of paths as an absolute path: "~" and "~/..." under home, "${workspaceFolder}"
// and what follows it under workspace. A path of any other form is refused, naming it.
func Resolve(paths []string, home, workspace string) ([]string, error) {
	var out []string
	for _, p := range paths {
		var abs string
		switch {
		case p == "~" || strings.HasPrefix(p, "~/"):
			abs = filepath.Join(home, strings.TrimPrefix(p, "~"))
		case strings.HasPrefix(p, workspaceVar) && workspace != "":
			abs = filepath.Join(workspace, strings.TrimPrefix(p, workspaceVar))
		case filepath.IsAbs(p):
			abs = filepath.Clean(p)
		default:
			return nil, fmt.Errorf("sandbox.filesystem path %q: want an absolute path, ~/... or %s/...", p, workspaceVar)
		}
		out = append(out, abs)
	}
	return out, nil
}

// Check refuses paths Resolve would refuse, before a server starts.
func (w Wants) Check(workspace string) error {
	for _, paths := range [][]string{w.AllowWrite, w.DenyRead, w.DenyWrite} {
		if _, err := Resolve(paths, "/", workspace); err != nil {
			return err
		}
	}
	return nil
}
