package sandbox

import (
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	root := Facts{Enabled: true, MapOthers: true, UIDRange: true, LandlockABI: 6}
	with := func(edit func(*Facts)) Facts { f := root; edit(&f); return f }
	for _, tc := range []struct {
		name  string
		facts Facts
		in    []Layer
		why   map[Layer]string // a part of why each named layer is not in force
	}{
		{"root with a range", root, []Layer{LayerUID, LayerPID, LayerNetwork, LayerMount, LayerLandlock, LayerLimits}, nil},
		{"no network namespace", with(func(f *Facts) { f.Network = "bringing up lo: operation not permitted" }),
			[]Layer{LayerUID, LayerPID, LayerMount, LayerLandlock, LayerLimits}, map[Layer]string{LayerNetwork: "no network namespace of its own: bringing up lo"}},
		{"off", with(func(f *Facts) { f.Enabled = false }), nil,
			map[Layer]string{LayerUID: "--sandbox=false", LayerPID: "--sandbox=false", LayerMount: "--sandbox=false"}},
		{"a normal user", with(func(f *Facts) { f.MapOthers = false; f.Cgroups = "making a memory cgroup: permission denied" }), []Layer{LayerPID, LayerNetwork, LayerMount, LayerLandlock},
			map[Layer]string{LayerUID: "no CAP_SETUID", LayerLimits: "no cgroups of their own: making a memory cgroup"}},
		{"root without a range", with(func(f *Facts) { f.UIDRange = false }), []Layer{LayerPID, LayerNetwork, LayerMount, LayerLandlock, LayerLimits},
			map[Layer]string{LayerUID: "no --server-uid-range"}},
		{"no user namespace", with(func(f *Facts) { f.UserNS = "operation not permitted" }), []Layer{},
			map[Layer]string{LayerUID: "no user namespace: operation not permitted", LayerPID: "no user namespace", LayerMount: "no user namespace",
				LayerLandlock: "no user namespace", LayerLimits: "no user namespace"}},
		{"/proc masked", with(func(f *Facts) { f.Proc = "mounting proc: operation not permitted" }), []Layer{LayerUID, LayerNetwork, LayerMount, LayerLandlock, LayerLimits},
			map[Layer]string{LayerPID: "no /proc of its own: mounting proc"}},
		{"no read-only mounts", with(func(f *Facts) { f.ReadOnly = "mount_setattr: function not implemented" }), []Layer{LayerUID, LayerPID, LayerNetwork, LayerLandlock, LayerLimits},
			map[Layer]string{LayerMount: "mount_setattr"}},
		{"no Landlock", with(func(f *Facts) { f.LandlockABI, f.Landlock = 0, "landlock_create_ruleset: function not implemented" }),
			[]Layer{LayerUID, LayerPID, LayerNetwork, LayerMount, LayerLimits}, map[Layer]string{LayerLandlock: "no Landlock: landlock_create_ruleset"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.facts)
			if len(got) != len(Layers) {
				t.Fatalf("%d layers, want every one of %d named", len(got), len(Layers))
			}
			for _, s := range got {
				want := false
				for _, l := range tc.in {
					want = want || l == s.Layer
				}
				if s.InForce != want {
					t.Errorf("%s in force: %v, want %v (%s)", s.Layer, s.InForce, want, s.Why)
				}
				if !s.InForce && s.Why == "" {
					t.Errorf("%s is not in force and says not why", s.Layer)
				}
				if part, ok := tc.why[s.Layer]; ok && !strings.Contains(s.Why, part) {
					t.Errorf("%s: why %q, want it to say %q", s.Layer, s.Why, part)
				}
			}
		})
	}
}

func TestSummary(t *testing.T) {
	got := Summary(Decide(Facts{Enabled: true, MapOthers: true, LandlockABI: 1, Cgroups: "no cgroup v1 pids hierarchy"}))
	want := "in force: pid, mount, landlock, network; not in force: uid (no --server-uid-range: the servers of every project share one uid), " +
		"limits (no cgroups of their own: no cgroup v1 pids hierarchy)"
	if got != want {
		t.Errorf("Summary:\n got %s\nwant %s", got, want)
	}
}
