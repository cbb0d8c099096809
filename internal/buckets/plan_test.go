package buckets

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

func TestPlan(t *testing.T) {
	held := func(ks ...int) map[int]bool {
		m := map[int]bool{}
		for _, k := range ks {
			m[k] = true
		}
		return m
	}
	holders := func(who string, ks ...int) map[int]string {
		m := map[int]string{}
		for _, k := range ks {
			m[k] = who
		}
		return m
	}
	span := func(from, to int) []int {
		var out []int
		for k := from; k < to; k++ {
			out = append(out, k)
		}
		return out
	}
	cases := map[string]struct {
		v             view
		take, release int
	}{
		"alone: takes every bucket": {
			v:    view{me: "a", buckets: 8, replicas: 1, holders: map[int]string{}, mine: held()},
			take: 8,
		},
		"alone with one bucket": {
			v:    view{me: "a", buckets: 1, replicas: 1, holders: map[int]string{}, mine: held()},
			take: 1,
		},
		"a second replica: takes half, none held yet": {
			v:    view{me: "b", buckets: 8, replicas: 2, holders: holders("a", 0, 1, 2, 3), mine: held()},
			take: 4,
		},
		"a second replica while the first holds all: nothing free, waits": {
			v: view{me: "b", buckets: 8, replicas: 2, holders: holders("a", span(0, 8)...), mine: held()},
		},
		"the first, seeing the second: gives up its surplus": {
			v:       view{me: "a", buckets: 8, replicas: 2, holders: holders("a", span(0, 8)...), mine: held(span(0, 8)...)},
			release: 4,
		},
		"at its share: nothing": {
			v: view{me: "a", buckets: 8, replicas: 2, holders: holders("a", 0, 1, 2, 3), mine: held(0, 1, 2, 3)},
		},
		"handing off counts against the share": {
			v: view{me: "a", buckets: 8, replicas: 2, holders: holders("a", span(0, 8)...), mine: held(0, 1, 2, 3), draining: 4},
		},
		"handing off, with free buckets: takes none past the share": {
			v:    view{me: "a", buckets: 8, replicas: 2, holders: holders("a", 0, 1, 2), mine: held(0, 1), draining: 1},
			take: 1,
		},
		"a replica gone: takes its buckets": {
			v:    view{me: "a", buckets: 8, replicas: 1, holders: holders("a", 0, 1, 2, 3), mine: held(0, 1, 2, 3)},
			take: 4,
		},
		"three replicas: the ceiling": {
			v:    view{me: "c", buckets: 64, replicas: 3, holders: holders("a", span(0, 42)...), mine: held()},
			take: 22,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := plan(tc.v)
			if len(m.take) != tc.take || len(m.release) != tc.release {
				t.Fatalf("take %v, release %v; want %d and %d", m.take, m.release, tc.take, tc.release)
			}
			for _, k := range m.take {
				if _, ok := tc.v.holders[k]; ok {
					t.Fatalf("takes bucket %d, which %s holds", k, tc.v.holders[k])
				}
			}
			for _, k := range m.release {
				if !tc.v.mine[k] {
					t.Fatalf("releases bucket %d, which it does not serve", k)
				}
			}
		})
	}
}

// Replicas prefer different buckets, and keep their preference: what one gives up is what it
// ranks last.
func TestRankedSpreadsPreferences(t *testing.T) {
	all := make([]int, 64)
	for k := range all {
		all[k] = k
	}
	a, b := ranked("replica-a", all), ranked("replica-b", all)
	if slices.Equal(a, b) {
		t.Fatal("two replicas rank the buckets alike: they would contend for the same ones")
	}
	if !slices.Equal(a, ranked("replica-a", all)) {
		t.Fatal("a replica's ranking changes between calls")
	}
	m := plan(view{me: "replica-a", buckets: 64, replicas: 2, holders: map[int]string{}, mine: mapOf(all)})
	if !slices.Equal(m.release, a[32:]) {
		t.Fatalf("released %v; want the 32 it ranks last", m.release)
	}
}

func mapOf(ks []int) map[int]bool {
	m := map[int]bool{}
	for _, k := range ks {
		m[k] = true
	}
	return m
}

func TestOf(t *testing.T) {
	key := types.NamespacedName{Namespace: "team-a", Name: "shop"}
	if got := Of(key, 64, ""); got != Of(key, 64, "") || got < 0 || got >= 64 {
		t.Fatalf("Of = %d: not stable or out of range", got)
	}
	if Of(key, 1, "") != 0 || Of(key, 0, "") != 0 {
		t.Fatal("one bucket (or none): every project is in bucket 0")
	}
	if Of(key, 64, "7") != 7 {
		t.Fatal("a pin below the count is the bucket")
	}
	for _, pin := range []string{"64", "-1", "x", " 7"} {
		if Of(key, 64, pin) != Of(key, 64, "") {
			t.Fatalf("pin %q: a pin that is no bucket is ignored", pin)
		}
	}
	// "a/bc" and "ab/c" are different projects.
	if Of(types.NamespacedName{Namespace: "a", Name: "bc"}, 1<<20, "") == Of(types.NamespacedName{Namespace: "ab", Name: "c"}, 1<<20, "") {
		t.Fatal("the separator is not hashed")
	}
	// Spread: 6,400 projects over 64 buckets, none empty or holding more than twice its share.
	counts := make([]int, 64)
	for i := range 6400 {
		counts[Of(types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("p%d", i)}, 64, "")]++
	}
	for k, n := range counts {
		if n == 0 || n > 200 {
			t.Fatalf("bucket %d holds %d of 6,400 projects", k, n)
		}
	}
	if FairShare(64, 3) != 22 || FairShare(64, 0) != 64 || FairShare(1, 2) != 1 {
		t.Fatal("FairShare is the ceiling of buckets over replicas")
	}
}

// A pinned project's requests find its bucket once its object has been seen, and lose the pin
// with the label.
func TestPins(t *testing.T) {
	p := NewPins(64)
	key := types.NamespacedName{Namespace: "ns", Name: "shop"}
	hashed := Of(key, 64, "")
	pin := (hashed + 1) % 64
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop", Labels: map[string]string{LabelPin: fmt.Sprint(pin)}}}
	if p.Of(key) != hashed {
		t.Fatal("a project not seen yet is in its hash's bucket")
	}
	if p.note(obj) != pin || p.Of(key) != pin {
		t.Fatalf("pinned to %d: note %d, Of %d", pin, p.note(obj), p.Of(key))
	}
	obj.Labels = nil
	if p.note(obj) != hashed || p.Of(key) != hashed {
		t.Fatal("a pin removed: the hash's bucket again")
	}
	obj.Labels = map[string]string{LabelPin: fmt.Sprint(pin)}
	p.note(obj)
	p.Forget(key)
	if p.Of(key) != hashed {
		t.Fatal("a deleted project's pin outlives it: one made again under its name would be routed by it")
	}
}
