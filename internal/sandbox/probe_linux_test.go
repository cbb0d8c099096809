package sandbox

import (
	"testing"
)

// The probe names every layer: in force, or with why not. On this kernel and as root, the
// namespaces' layers are expected; elsewhere the test says which are missing and why.
func TestProbe(t *testing.T) {
	f := Probe(true, true)
	t.Logf("facts: %+v", f)
	for _, s := range Decide(f) {
		if !s.InForce && s.Why == "" {
			t.Errorf("%s is not in force and says not why", s.Layer)
		}
	}
	t.Log(Summary(Decide(f)))
	if f.UserNS != "" {
		t.Skipf("no user namespace here: %s", f.UserNS)
	}
	if f.Proc != "" || f.ReadOnly != "" {
		t.Errorf("a user namespace but no /proc (%s) or read-only mounts (%s) of its own", f.Proc, f.ReadOnly)
	}
}
