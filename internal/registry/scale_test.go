package registry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/share"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkPerProjectPaths times what serving one project asks of the registry (a session's
// mount, the lookups of its calls, the gateway's observation for a sync, the release) with
// 10 to 10,000 other projects held, each with 3 servers and 10 sessions: the cost per
// operation must not grow with the projects held (make bench-scale measures the same end to
// end; this is its noise-free part).
//
//	go test ./internal/registry -run '^$' -bench PerProjectPaths
func BenchmarkPerProjectPaths(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprintf("projects=%d", n), func(b *testing.B) {
			r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
			defer r.Shutdown()
			keys := make([]types.NamespacedName, n)
			ctx := context.Background()
			for i := range keys {
				keys[i] = types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("p%05d", i)}
				r.SetDesired(keys[i], Desired{Servers: []string{"a", "b", "c"}})
				for j := range 10 {
					if _, err := r.Mount(ctx, keys[i], share.Who{Session: fmt.Sprintf("s%d", j)}, "bench"); err != nil {
						b.Fatal(err)
					}
				}
			}
			drain := make(chan struct{})
			go func() { // the reconciler's side of the wake-ups
				for {
					select {
					case <-r.Events():
					case <-drain:
						return
					}
				}
			}()
			defer close(drain)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				key := keys[i%n]
				if _, err := r.Mount(ctx, key, share.Who{Session: "new"}, "bench"); err != nil {
					b.Fatal(err)
				}
				for _, server := range []string{"a", "b", "c"} {
					r.Lookup(key, "new", server)
				}
				if len(r.ObserveServers(key).Servers) != 3 {
					b.Fatal("three servers")
				}
				r.Release(key, "new")
			}
		})
	}
}
