package toolname

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand"
	"strings"
	"testing"
)

// h is the hash a changed raw name gets.
func h(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return "_" + hex.EncodeToString(sum[:])[:HashLength]
}

func TestProject(t *testing.T) {
	long := strings.Repeat("x", 200)
	cases := map[string]struct{ server, raw, want string }{
		"plain":                {"github", "search_issues", "github__search_issues"},
		"dots and dashes":      {"my-srv", "v1.get", "my-srv__v1.get"},
		"leading underscore":   {"fs", "_private", "fs___private"},
		"space is hashed":      {"a", "x y", "a__x_y" + h("x y")},
		"slash is hashed":      {"a", "x/y", "a__x_y" + h("x/y")},
		"non-ASCII is hashed":  {"fs", "read file/ü", "fs__read_file__" + h("read file/ü")},
		"invalid UTF-8":        {"fs", "a\xffb", "fs__a_b" + h("a\xffb")},
		"empty raw":            {"fs", "", "fs__" + h("")},
		"exactly 128 kept":     {"s", strings.Repeat("y", 125), "s__" + strings.Repeat("y", 125)},
		"129 shortened":        {"s", strings.Repeat("y", 126), "s__" + strings.Repeat("y", 128-3-9) + h(strings.Repeat("y", 126))},
		"long and sanitized":   {"srv", strings.Repeat("é", 200), "srv__" + strings.Repeat("_", 128-5-9) + h(strings.Repeat("é", 200))},
		"long server kept":     {strings.Repeat("s", 64), "t", strings.Repeat("s", 64) + "__t"},
		"long server and tool": {strings.Repeat("s", 64), long, strings.Repeat("s", 64) + "__" + strings.Repeat("x", 128-66-9) + h(long)},
		"server too long":      {strings.Repeat("s", 100), "t", strings.Repeat("s", 64) + "__t"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Project(tc.server, tc.raw)
			if got != tc.want {
				t.Fatalf("Project(%q, %q) =\n  %q\nwant\n  %q", tc.server, tc.raw, got, tc.want)
			}
			if !Valid(got) {
				t.Fatalf("%q (%d characters) is not a valid tool name", got, len(got))
			}
		})
	}
	a, b := Project("srv", long+"a"), Project("srv", long+"b")
	if a == b || len(a) != MaxLength || !strings.HasPrefix(a, "srv__xxx") {
		t.Fatalf("long names must stay distinct and capped: %q %q", a, b)
	}
}

// pair is one (server, raw) input.
type pair struct{ server, raw string }

// The properties the projection relies on, over many random sets of pairs, including raw names
// that sanitize alike ("x y", "x_y", "x.y", "x/y"), names around the length limit, and
// servers that are prefixes of each other:
//   - a pair's name is the same whatever else is in the set (it is computed once per set and
//     compared with a reference computed alone);
//   - distinct pairs get distinct names;
//   - every name is valid and at most MaxLength characters;
//   - the server part is recoverable: the name starts with "<server>__".
func TestProjectProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(20240601))
	servers := []string{"a", "ab", "a-b", "a_b", "b", "gh", "x1", "my-server", "S",
		strings.Repeat("s", 64), strings.Repeat("s", 63) + "t", "a_b_c", "a-_-b"}
	stems := []string{"x y", "x_y", "x.y", "x/y", "x-y", "x__y", "x", "x_", "_x", "", " ", "_",
		"tool", "Tool", "tööl", "t\xffl", "get:item", "get_item", "a__b", "b__c"}
	alphabet := "abxy_-. /:é\x00"
	randomRaw := func() string {
		switch rng.Intn(4) {
		case 0:
			return stems[rng.Intn(len(stems))]
		case 1: // around the length limit, sharing a long common prefix
			n := 40 + rng.Intn(100)
			return strings.Repeat("y", n) + stems[rng.Intn(len(stems))]
		case 2: // a kept name that looks like a changed one
			s := stems[rng.Intn(len(stems))]
			return strings.NewReplacer(" ", "_", "/", "_").Replace(s) + fmt.Sprintf("_%08x", rng.Uint32())
		default:
			var b strings.Builder
			for n := rng.Intn(12); n > 0; n-- {
				r := []rune(alphabet)
				b.WriteRune(r[rng.Intn(len(r))])
			}
			return b.String()
		}
	}
	reference := map[pair]string{}
	for _, s := range servers {
		for _, r := range stems {
			reference[pair{s, r}] = Project(s, r)
		}
	}
	for round := 0; round < 2000; round++ {
		set := map[pair]bool{}
		for n := 1 + rng.Intn(40); n > 0; n-- {
			set[pair{servers[rng.Intn(len(servers))], randomRaw()}] = true
		}
		byName := map[string]pair{}
		for p := range set {
			name := Project(p.server, p.raw)
			if ref, ok := reference[p]; ok && ref != name {
				t.Fatalf("round %d: %q/%q is %q in this set but %q alone", round, p.server, p.raw, name, ref)
			}
			reference[p] = name
			if !Valid(name) {
				t.Fatalf("round %d: %q/%q gives invalid name %q", round, p.server, p.raw, name)
			}
			if !strings.HasPrefix(name, p.server+Separator) {
				t.Fatalf("round %d: %q/%q gives %q, which does not start with its server", round, p.server, p.raw, name)
			}
			if i := strings.Index(name, Separator); name[:i] != p.server {
				t.Fatalf("round %d: %q splits at the wrong separator", round, name)
			}
			if other, ok := byName[name]; ok {
				t.Fatalf("round %d: %q/%q and %q/%q both give %q", round, p.server, p.raw, other.server, other.raw, name)
			}
			byName[name] = p
		}
	}
	// And across everything ever generated, not only within one set.
	seen := map[string]pair{}
	for p, name := range reference {
		if other, ok := seen[name]; ok {
			t.Fatalf("%q/%q and %q/%q both give %q", p.server, p.raw, other.server, other.raw, name)
		}
		seen[name] = p
	}
}
