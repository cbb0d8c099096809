package buckets

import (
	"hash/fnv"
	"slices"
	"strconv"
)

// view is what one tick of a Holder sees: the buckets and who holds each, and how many
// replicas are alive. It is built from the Leases and the Holder's own records.
type view struct {
	me       string
	buckets  int
	replicas int            // live replica Leases, this replica's included
	holders  map[int]string // bucket → holder, for Leases held and not expired
	mine     map[int]bool   // buckets this replica holds and serves (draining ones excluded)
	draining int            // buckets this replica is giving up and still holds
}

// moves is what a tick does: the buckets to try to take (best first) and the ones to give
// up. Renewing what it holds is not a decision: every tick renews.
type moves struct {
	take    []int
	release []int
}

// plan decides a tick's moves. A replica holds at most its fair share of the buckets: under it,
// it tries to take buckets nobody holds, in the order its preference ranks them (rendezvous
// hashing of the replica and the bucket, so that replicas contend for different buckets and a
// bucket goes back to the same replica after a restart of the others); over it, it gives up
// the buckets it prefers least. Buckets being given up count against the share until they are
// released, so a replica never holds more than its share plus what it is handing off.
func plan(v view) moves {
	share := FairShare(v.buckets, v.replicas)
	held := len(v.mine) + v.draining
	var m moves
	switch {
	case len(v.mine) > share:
		ranked := ranked(v.me, keys(v.mine))
		m.release = ranked[share:]
	case held < share:
		var free []int
		for k := range v.buckets {
			if _, taken := v.holders[k]; !taken {
				free = append(free, k)
			}
		}
		free = ranked(v.me, free)
		m.take = free[:min(len(free), share-held)]
	}
	return m
}

// ranked orders buckets by the replica's preference for them, most preferred first.
func ranked(me string, buckets []int) []int {
	out := slices.Clone(buckets)
	slices.SortFunc(out, func(a, b int) int {
		sa, sb := score(me, a), score(me, b)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return a - b
	})
	return out
}

// score is the replica's rendezvous weight for a bucket.
func score(me string, k int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(me))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strconv.Itoa(k)))
	return h.Sum64()
}

func keys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
