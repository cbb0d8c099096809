package conn

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// catalog is what a server offers, as listed after connect and after every list_changed.
// Catalogs are interned (intern): every connection whose server lists the same things, as
// sessions see them, holds one shared copy. A thousand projects using the same server then
// keep its tools (their schemas decoded into maps, tens of KB a server) once, not a thousand
// times. A catalog is never modified once interned.
type catalog struct {
	tools     []*mcp.Tool // after the allow/deny filter and the schema bound
	rawTools  int         // before them
	omitted   int         // tools that passed the filter but are over --max-schema-bytes
	notes     []string    // what was left out, and why
	prompts   []*mcp.Prompt
	resources []*mcp.Resource
	templates []*mcp.ResourceTemplate
	// raw are the items as the server sent them, by kind and key (listitems.go); none when
	// listed through the SDK.
	raw    [kinds]map[string]*RawItem
	hints  [kinds]CacheHints // each list's caching hints (2026-07-28; listitems.go)
	digest [sha256.Size]byte // of all of the above
}

// apply shows the catalog in a snapshot.
func (cat *catalog) apply(s *Snapshot) {
	s.Tools, s.RawToolCount, s.OmittedTools, s.Notes = cat.tools, cat.rawTools, cat.omitted, cat.notes
	s.Prompts, s.Resources, s.Templates = cat.prompts, cat.resources, cat.templates
	s.catalog = cat
}

// same reports whether a snapshot already shows the catalog (compared as sessions see it:
// catalogs are interned, so equal ones are one).
func (cat *catalog) same(s Snapshot) bool {
	return s.catalog == cat
}

// CacheHints are a server's caching hints for one of its lists (2026-07-28's ttlMs and
// cacheScope): Known false when it gave none.
type CacheHints struct {
	Known   bool
	TTLMs   int
	Private bool
}

// Merge is the more cautious of two hints: the lower ttlMs, and private if either is (a hint
// not known gives way to one that is).
func (h CacheHints) Merge(o CacheHints) CacheHints {
	switch {
	case !o.Known:
		return h
	case !h.Known:
		return o
	}
	return CacheHints{Known: true, TTLMs: min(h.TTLMs, o.TTLMs), Private: h.Private || o.Private}
}

// CacheHints are the caching hints of the list of a kind as the server last gave them.
func (s Snapshot) CacheHints(kind Kind) CacheHints {
	if s.catalog == nil {
		return CacheHints{}
	}
	return s.catalog.hints[kind]
}

// catalogs are the interned catalogs by digest, held weakly: a catalog no snapshot holds any
// more is collected, and its entry removed.
var catalogs = struct {
	sync.Mutex
	m map[[sha256.Size]byte]weak.Pointer[catalog]
}{m: map[[sha256.Size]byte]weak.Pointer[catalog]{}}

// intern returns the interned catalog equal to cat: an existing one, or cat itself, now
// interned.
func intern(cat catalog) *catalog {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, list := range []any{cat.tools, cat.prompts, cat.resources, cat.templates, cat.notes} {
		_ = enc.Encode(list) // what sessions see of each item; these types always encode
	}
	h.Write([]byte(strconv.Itoa(cat.rawTools) + "/" + strconv.Itoa(cat.omitted)))
	fmt.Fprintf(h, "\n%v", cat.hints)
	for kind, raws := range cat.raw {
		for _, key := range slices.Sorted(maps.Keys(raws)) {
			fmt.Fprintf(h, "\n%d %q %t %q ", kind, key, raws[key].Newest, raws[key].TaskSupport)
			h.Write(raws[key].Members)
		}
	}
	h.Sum(cat.digest[:0])

	catalogs.Lock()
	defer catalogs.Unlock()
	if have := catalogs.m[cat.digest].Value(); have != nil {
		return have
	}
	p := &cat
	catalogs.m[cat.digest] = weak.Make(p)
	runtime.AddCleanup(p, func(digest [sha256.Size]byte) {
		catalogs.Lock()
		defer catalogs.Unlock()
		if catalogs.m[digest].Value() == nil { // not a newer catalog with the same digest
			delete(catalogs.m, digest)
		}
	}, cat.digest)
	return p
}

// interned reports whether a catalog with this digest is interned (tests).
func interned(digest [sha256.Size]byte) bool {
	catalogs.Lock()
	defer catalogs.Unlock()
	_, ok := catalogs.m[digest]
	return ok
}
