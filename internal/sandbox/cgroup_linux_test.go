package sandbox

import (
	"maps"
	"testing"
)

func TestOwnCgroups(t *testing.T) {
	got := ownCgroups([]byte("9:name=systemd:/\n8:pids:/kubepods/pod1\n4:memory:/kubepods/pod1/c\n2:cpu,cpuacct:/x\n0::/unified\n"))
	want := map[string]string{"name=systemd": "/", "pids": "/kubepods/pod1", "memory": "/kubepods/pod1/c", "cpu": "/x", "cpuacct": "/x"}
	delete(got, "") // the cgroup v2 line names no controller
	if !maps.Equal(got, want) {
		t.Errorf("ownCgroups = %v, want %v", got, want)
	}
}
