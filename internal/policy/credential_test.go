package policy

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// CapEff is read from a /proc/<pid>/status text; a missing or malformed line is an error
// naming what is wrong.
func TestEffectiveCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         uint64
		err          string
	}{
		{"root", "Name:\tprojectmcp\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t000001ffffffffff\n", 0x1ffffffffff, ""},
		{"chart's set", "CapPrm:\t00000000000000e1\nCapEff:\t00000000000000e1\nCapBnd:\t00000000000000e1\n", 0xe1, ""},
		{"none", "Uid:\t65532\t65532\t65532\t65532\nCapEff:\t0000000000000000\n", 0, ""},
		{"no line", "Name:\tx\nCapPrm:\t0000000000000000\n", 0, "no CapEff line"},
		{"not hex", "CapEff:\tzz\n", 0, `CapEff "zz": not a hexadecimal mask`},
		{"empty", "", 0, "no CapEff line"},
	} {
		got, err := EffectiveCapabilities(tc.status)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %#x %v, want %#x", tc.name, got, err, tc.want)
		}
	}
}

// Missing capabilities are named, in the order needed; CAP_CHOWN is needed only when each
// server gets a HOME of its own.
func TestMissingCapabilities(t *testing.T) {
	own := (&Isolation{}).NeededCapabilities()
	shared := (&Isolation{Home: "/home/dev"}).NeededCapabilities()
	for _, tc := range []struct {
		name string
		mask uint64
		need []Capability
		want []string
	}{
		{"all of root", 0x1ffffffffff, own, nil},
		{"setuid, setgid, kill, chown", 1<<0 | 1<<5 | 1<<6 | 1<<7, own, nil},
		{"no chown", 1<<5 | 1<<6 | 1<<7, own, []string{"CAP_CHOWN"}},
		{"no chown, shared HOME", 1<<5 | 1<<6 | 1<<7, shared, nil},
		{"none", 0, own, []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN"}},
		{"dac_override alone", 1 << 1, own, []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN"}},
		{"only setuid", 1 << 7, own, []string{"CAP_SETGID", "CAP_KILL", "CAP_CHOWN"}},
	} {
		var got []string
		for _, c := range MissingCapabilities(tc.mask, tc.need) {
			got = append(got, c.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: missing %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The process's own capabilities are checked only when servers run as another user, and a
// refusal names what is needed.
func TestCheckCapabilities(t *testing.T) {
	if err := (&Isolation{}).CheckCapabilities(); err != nil {
		t.Fatalf("no Credential: %v", err)
	}
	iso := &Isolation{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	err := iso.CheckCapabilities()
	eff, rerr := EffectiveCapabilities(readStatus(t))
	if rerr != nil {
		t.Fatal(rerr)
	}
	missing := MissingCapabilities(eff, iso.NeededCapabilities())
	switch {
	case len(missing) == 0 && err != nil:
		t.Errorf("this process has every needed capability, yet: %v", err)
	case len(missing) > 0 && (err == nil || !strings.Contains(err.Error(), missing[0].Name)):
		t.Errorf("this process lacks %v, yet the error is %v", missing, err)
	}
}

func readStatus(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
