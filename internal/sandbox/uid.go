package sandbox

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
)

// Range is a range of uids (and the gids of the same numbers) the servers run as: First to
// Last, both included.
type Range struct{ First, Last uint32 }

// ParseRange reads "FIRST-LAST" (100000-165535). Uid 0 is refused: a server mapped to root
// would own what root owns.
func ParseRange(s string) (Range, error) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		return Range{}, fmt.Errorf("%q: want FIRST-LAST, e.g. 100000-165535", s)
	}
	first, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 32)
	last, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 32)
	switch {
	case err1 != nil || err2 != nil:
		return Range{}, fmt.Errorf("%q: not two numeric ids", s)
	case first == 0:
		return Range{}, fmt.Errorf("%q: uid 0 is root's", s)
	case last < first:
		return Range{}, fmt.Errorf("%q: the last id is below the first", s)
	}
	return Range{First: uint32(first), Last: uint32(last)}, nil
}

// size is how many ids the range holds.
func (r Range) size() uint64 { return uint64(r.Last) - uint64(r.First) + 1 }

// home is where a key's uid is looked for first: a stable hash of the key into the range.
func (r Range) home(key string) uint32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return r.First + uint32(h.Sum64()%r.size())
}

// ErrRangeFull is returned when every uid of the range is held by another project.
var ErrRangeFull = errors.New("every uid of --server-uid-range is held by another project")

// UIDs gives each project (a key: namespace/name) a uid of its own from a Range, as long as
// one of its servers runs: the uid its hash names, or when another project holds that one, the
// next free one above it (wrapping to the range's start). The same projects asking in the same
// order get the same uids; no two projects hold one at once.
type UIDs struct {
	r     Range
	mu    sync.Mutex
	byKey map[string]*held
	taken map[uint32]string
}

type held struct {
	uid  uint32
	refs int
}

// NewUIDs hands out the uids of r.
func NewUIDs(r Range) *UIDs {
	return &UIDs{r: r, byKey: map[string]*held{}, taken: map[uint32]string{}}
}

// Acquire returns key's uid, which it holds until as many Releases.
func (u *UIDs) Acquire(key string) (uint32, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if h, ok := u.byKey[key]; ok {
		h.refs++
		return h.uid, nil
	}
	uid, ok := pick(u.r, key, func(id uint32) bool { _, ok := u.taken[id]; return ok })
	if !ok {
		return 0, ErrRangeFull
	}
	u.byKey[key] = &held{uid: uid, refs: 1}
	u.taken[uid] = key
	return uid, nil
}

// Release gives back one Acquire of key's uid; the last frees it for another project.
func (u *UIDs) Release(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	h, ok := u.byKey[key]
	if !ok {
		return
	}
	if h.refs--; h.refs == 0 {
		delete(u.byKey, key)
		delete(u.taken, h.uid)
	}
}

// pick is key's uid in r: its hash's, or the first one after it that taken does not hold.
func pick(r Range, key string, taken func(uint32) bool) (uint32, bool) {
	start := uint64(r.home(key) - r.First)
	for i := range r.size() {
		id := r.First + uint32((start+i)%r.size())
		if !taken(id) {
			return id, true
		}
	}
	return 0, false
}
