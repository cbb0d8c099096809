package main

import "testing"

// A proxied request's word on its client is believed from a live replica's host only, and,
// when the OS names the process calling (a connection from this machine or pod), only from one
// of the controller's own uid: a stdio server beside it, under --server-uid, is not a replica.
func TestFromReplica(t *testing.T) {
	replicas := func(host string) bool { return host == "10.0.0.7" || host == "::1" }
	const self = 65532
	for _, c := range []struct {
		what   string
		remote string
		local  bool
		uid    int
		known  bool
		want   bool
	}{
		{"another pod that is a replica", "10.0.0.7:41000", false, 0, false, true},
		{"another pod that is not", "10.0.0.8:41000", false, 0, false, false},
		{"a replica on this machine, as the controller's uid", "[::1]:41000", true, self, true, true},
		{"a process of another uid at a replica's address", "[::1]:41000", true, 65533, true, false},
		{"a local process the OS does not name (gone, or a closing socket)", "[::1]:41000", true, 0, false, false},
		{"root in this pod at a replica's address", "10.0.0.7:41000", true, 0, true, false},
		{"no port", "10.0.0.7", false, 0, false, false},
	} {
		if got := fromReplica(c.remote, replicas, c.local, c.uid, c.known, self); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
}
