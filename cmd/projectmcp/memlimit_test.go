package main

import (
	"io/fs"
	"math"
	"runtime/debug"
	"testing"

	"github.com/go-logr/logr"
)

// The controller's soft memory limit: GOMEMLIMIT wins; else 90 % of the container's limit,
// from the downward API's variable, else cgroup v2, else v1; none when the limit is
// unbounded or cannot be found.
func TestMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1)) // restore the test process's own
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if v, ok := m[name]; ok {
				return []byte(v), nil
			}
			return nil, fs.ErrNotExist
		}
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	v2, v1 := cgroupMemoryFiles[0], cgroupMemoryFiles[1]
	for _, tc := range []struct {
		name  string
		env   map[string]string
		files map[string]string
		want  int64
	}{
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "500MiB", memoryLimitEnv: "1073741824"}, nil, 0},
		{"downward API", map[string]string{memoryLimitEnv: "1073741824"}, map[string]string{v2: "2147483648\n"}, 966367641},
		{"cgroup v2", nil, map[string]string{v2: "2147483648\n"}, 1932735283},
		{"cgroup v2, no limit", nil, map[string]string{v2: "max\n", v1: "1073741824"}, 0},
		{"cgroup v1", nil, map[string]string{v1: "1073741824\n"}, 966367641},
		{"cgroup v1, no limit", nil, map[string]string{v1: "9223372036854771712\n"}, 0},
		{"nothing", nil, nil, 0},
		{"garbage", map[string]string{memoryLimitEnv: "1Gi"}, nil, 0},
	} {
		debug.SetMemoryLimit(math.MaxInt64)
		got := setMemoryLimit(logr.Discard(), env(tc.env), files(tc.files))
		if got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
		want := tc.want
		if want == 0 {
			want = math.MaxInt64
		}
		if have := debug.SetMemoryLimit(-1); have != want {
			t.Errorf("%s: the runtime's limit is %d, want %d", tc.name, have, want)
		}
	}
}
