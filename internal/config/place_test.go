package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// The place's variables take the place's values wherever a server's values reach its process
// or its requests; every other reference stays for the Secret; one the place has no value for
// refuses the file naming the server, the field and the variable.
func TestExpandPlace(t *testing.T) {
	local := Place{ProjectDir: "/home/ann/shop", UserHome: "/home/ann"}
	cluster := Place{ProjectDir: "https://git.example.com/shop"}
	for name, tc := range map[string]struct {
		place   Place
		in      string
		want    string
		wantErr string
	}{
		"project folder":               {place: local, in: "${PROJECT_DIR}", want: "/home/ann/shop"},
		"inside a path":                {place: local, in: "--root=${PROJECT_DIR}/docs", want: "--root=/home/ann/shop/docs"},
		"user home":                    {place: local, in: "${USER_HOME}/notes", want: "/home/ann/notes"},
		"both and a secret":            {place: local, in: "${USER_HOME}:${TOKEN}:${PROJECT_DIR}", want: "/home/ann:${TOKEN}:/home/ann/shop"},
		"secret with default":          {place: local, in: "${TOKEN:-x}", want: "${TOKEN:-x}"},
		"cluster project":              {place: cluster, in: "${PROJECT_DIR}", want: "https://git.example.com/shop"},
		"cluster home refused":         {place: cluster, in: "${USER_HOME}/notes", wantErr: `server "s": its args[0] refers to ${USER_HOME}, the user's home, which only projectmcp dev's servers have`},
		"cluster home with default":    {place: cluster, in: "${USER_HOME:-/data}/notes", want: "/data/notes"},
		"no project folder refused":    {place: Place{}, in: "${PROJECT_DIR}", wantErr: `its args[0] refers to ${PROJECT_DIR}, the project folder`},
		"plain text":                   {place: Place{}, in: "$USER_HOME", want: "$USER_HOME"},
		"malformed left to the parser": {place: local, in: "${", wantErr: "unterminated variable reference"},
	} {
		t.Run(name, func(t *testing.T) {
			spec := &v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{{Name: "s", Stdio: &v1alpha1.StdioServer{Command: "run", Args: []string{tc.in}}}}}
			err := ExpandPlace(spec, tc.place)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case tc.wantErr == "" && spec.Servers[0].Stdio.Args[0] != tc.want:
				t.Errorf("%q became %q, want %q", tc.in, spec.Servers[0].Stdio.Args[0], tc.want)
			}
		})
	}
}

// Every value that reaches a server's process or its requests is expanded.
func TestExpandPlaceFields(t *testing.T) {
	spec := &v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		{Name: "a", Stdio: &v1alpha1.StdioServer{Command: "${PROJECT_DIR}/bin/srv", Args: []string{"${USER_HOME}"},
			Env: []v1alpha1.NameValue{{Name: "ROOT", Value: "${PROJECT_DIR}"}}, WorkingDir: "${PROJECT_DIR}/w"}},
		{Name: "b", HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1/${PROJECT_DIR}", HeadersHelper: "${PROJECT_DIR}/h.sh",
			Headers: []v1alpha1.NameValue{{Name: "X-Root", Value: "${PROJECT_DIR}"}}}},
	}}
	if err := ExpandPlace(spec, Place{ProjectDir: "/p", UserHome: "/h"}); err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.MCPServer{
		{Name: "a", Stdio: &v1alpha1.StdioServer{Command: "/p/bin/srv", Args: []string{"/h"},
			Env: []v1alpha1.NameValue{{Name: "ROOT", Value: "/p"}}, WorkingDir: "/p/w"}},
		{Name: "b", HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1//p", HeadersHelper: "/p/h.sh",
			Headers: []v1alpha1.NameValue{{Name: "X-Root", Value: "/p"}}}},
	}
	if d := cmp.Diff(want, spec.Servers); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
