package config

import (
	"errors"
	"fmt"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Two variables of .dsh/mcp.json have their value from where the file is read rather than from
// the project's Secret, as VS Code's and Cursor's ${workspaceFolder} and ${userHome} do:
const (
	// ProjectDirVar is the project folder: the folder holding .dsh/, or spec.project.
	ProjectDirVar = "PROJECT_DIR"
	// UserHomeVar is the home of the user running projectmcp dev. Servers in a cluster run on
	// another machine, under another user, so there it has no value and a file naming it is
	// refused.
	UserHomeVar = "USER_HOME"
)

// Place is where a .dsh/mcp.json is read and its servers run: the values of ProjectDirVar and
// UserHomeVar, "" for a variable that has none there, and whether the servers run on the
// machine of the sessions' folders.
type Place struct {
	ProjectDir string
	UserHome   string
	// Local is true when the servers run on this machine, beside the folders the sessions
	// work in (projectmcp dev): only there does share "worktree" mean anything.
	Local bool
}

// ExpandPlace replaces the references to ProjectDirVar and UserHomeVar in every value of the
// spec's servers with the place's values, leaving every other reference for the controller to
// resolve from the Secret. A reference to one the place has no value for is an error naming
// the server and the field (never a value), so the file is refused rather than the server
// started without it. So is a server shared per worktree where the servers do not run beside
// the sessions' folders.
func ExpandPlace(spec *v1alpha1.ProjectMCPSpec, place Place) error {
	var errs []error
	for i := range spec.Servers {
		s := &spec.Servers[i]
		if err := WorktreeRefusal(*s, place.Local); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", DefaultPath, err))
		}
		for _, f := range placeFields(s) {
			out, err := expandPlace(*f.value, place)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: server %q: its %s %w", DefaultPath, s.Name, f.where, err))
				continue
			}
			*f.value = out
		}
	}
	return errors.Join(errs...)
}

// placeField is one string value of a server a place variable may appear in.
type placeField struct {
	where string
	value *string
}

// placeFields are the values of a server that reach the process or the request.
func placeFields(s *v1alpha1.MCPServer) []placeField {
	var fs []placeField
	if st := s.Stdio; st != nil {
		fs = append(fs, placeField{"command", &st.Command}, placeField{"workingDir", &st.WorkingDir})
		for i := range st.Args {
			fs = append(fs, placeField{fmt.Sprintf("args[%d]", i), &st.Args[i]})
		}
		for i := range st.Env {
			fs = append(fs, placeField{fmt.Sprintf("env %q", st.Env[i].Name), &st.Env[i].Value})
		}
	}
	if h := s.HTTP; h != nil {
		fs = append(fs, placeField{"url", &h.URL}, placeField{"headersHelper", &h.HeadersHelper})
		for i := range h.Headers {
			fs = append(fs, placeField{fmt.Sprintf("header %q", h.Headers[i].Name), &h.Headers[i].Value})
		}
	}
	return fs
}

// expandPlace is s with the place's variables replaced and every other reference kept as
// written.
func expandPlace(s string, place Place) (string, error) {
	refs, err := scanReferences(s)
	if err != nil || len(refs) == 0 {
		return s, err
	}
	out, last := "", 0
	for _, r := range refs {
		v, ours, err := placeValue(r.name, place)
		switch {
		case !ours:
			v = s[r.start:r.end] // not a place variable: the Secret's to resolve
		case err != nil && r.hasDefault:
			v = r.def
		case err != nil:
			return "", err
		}
		out += s[last:r.start] + v
		last = r.end
	}
	return out + s[last:], nil
}

// placeValue is the value of a place variable (ours), or why the place has none.
func placeValue(name string, place Place) (value string, ours bool, err error) {
	switch {
	case name == ProjectDirVar && place.ProjectDir != "":
		return place.ProjectDir, true, nil
	case name == ProjectDirVar:
		return "", true, fmt.Errorf("refers to ${%s}, the project folder, which the controller is not told (spec.project is empty: render's --project or mirror's --publish-project-path sets it)", ProjectDirVar)
	case name == UserHomeVar && place.UserHome != "":
		return place.UserHome, true, nil
	case name == UserHomeVar:
		return "", true, fmt.Errorf("refers to ${%s}, the user's home, which only projectmcp dev's servers have: in a cluster they run on another machine", UserHomeVar)
	}
	return "", false, nil
}

// WorktreeRefusal is why a server cannot be shared per worktree away from the sessions'
// machine (local false): its connections are keyed by a session's folder, a path on the
// machine the session runs on, and a server started elsewhere can neither tell two such
// folders apart nor start in one. nil when the server may run as it says.
func WorktreeRefusal(s v1alpha1.MCPServer, local bool) error {
	if local || s.Share != v1alpha1.ShareWorktree {
		return nil
	}
	return fmt.Errorf("server %q: share %q is for projectmcp dev alone, whose servers run beside the sessions' folders; "+
		"in a cluster they run on another machine: choose %q or %q", s.Name, v1alpha1.ShareWorktree, v1alpha1.ShareSession, v1alpha1.SharePrincipal)
}
