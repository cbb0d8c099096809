package sandbox

import (
	"slices"
	"testing"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        []string
		workspace string
		want      []string
		err       bool
	}{
		{"home", []string{"~", "~/.ssh", "~/a/../b"}, "/w", []string{"/h", "/h/.ssh", "/h/b"}, false},
		{"workspace", []string{"${workspaceFolder}", "${workspaceFolder}/out"}, "/w", []string{"/w", "/w/out"}, false},
		{"absolute", []string{"/etc/x/", "/a/../b"}, "", []string{"/etc/x", "/b"}, false},
		{"no workspace", []string{"${workspaceFolder}/out"}, "", nil, true},
		{"relative", []string{"out"}, "/w", nil, true},
		{"another user's home", []string{"~root/.ssh"}, "/w", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.in, "/h", tc.workspace)
			if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
				t.Errorf("Resolve(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}
