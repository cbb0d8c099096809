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
	review := "add_pull_request_review_comment_to_pending_review" // GitHub's; 74 characters as Claude Code shows it
	s64, s30 := strings.Repeat("s", 64), strings.Repeat("s", 30)
	under := strings.Repeat("a", 19) + "_" + strings.Repeat("b", 20) // a cut at 20 ends in '_'
	cases := map[string]struct {
		server, raw string
		budget      int
		want        string
	}{
		// The spec's limit: these are the names before budgets existed.
		"plain":                {"github", "search_issues", MaxLength, "github__search_issues"},
		"dots and dashes":      {"my-srv", "v1.get", MaxLength, "my-srv__v1.get"},
		"leading underscore":   {"fs", "_private", MaxLength, "fs___private"},
		"space is hashed":      {"a", "x y", MaxLength, "a__x_y" + h("x y")},
		"slash is hashed":      {"a", "x/y", MaxLength, "a__x_y" + h("x/y")},
		"non-ASCII is hashed":  {"fs", "read file/ü", MaxLength, "fs__read_file__" + h("read file/ü")},
		"invalid UTF-8":        {"fs", "a\xffb", MaxLength, "fs__a_b" + h("a\xffb")},
		"empty raw":            {"fs", "", MaxLength, "fs__" + h("")},
		"exactly 128 kept":     {"s", strings.Repeat("y", 125), MaxLength, "s__" + strings.Repeat("y", 125)},
		"129 shortened":        {"s", strings.Repeat("y", 126), MaxLength, "s__" + strings.Repeat("y", 128-3-9) + h(strings.Repeat("y", 126))},
		"long and sanitized":   {"srv", strings.Repeat("é", 200), MaxLength, "srv__" + strings.Repeat("_", 128-5-9) + h(strings.Repeat("é", 200))},
		"long server kept":     {s64, "t", MaxLength, s64 + "__t"},
		"long server and tool": {s64, long, MaxLength, s64 + "__" + strings.Repeat("x", 128-66-9) + h(long)},
		"refused server cut":   {strings.Repeat("s", 200), "t", MaxLength, strings.Repeat("s", 128-2-16-9) + h(strings.Repeat("s", 200)) + "__t" + h("t")},

		// The default budget.
		"short kept":         {"github", "search_issues", DefaultBudget, "github__search_issues"},
		"exactly 47 kept":    {"s", strings.Repeat("y", 44), DefaultBudget, "s__" + strings.Repeat("y", 44)},
		"48 shortened":       {"s", strings.Repeat("y", 45), DefaultBudget, "s__" + strings.Repeat("y", 47-3-9) + h(strings.Repeat("y", 45))},
		"GitHub's long tool": {"github", review, DefaultBudget, "github__add_pull_request_review_commen" + h(review)},
		"server fills room":  {strings.Repeat("s", 29), review, DefaultBudget, strings.Repeat("s", 29) + "__add_pul" + h(review)},
		"server past room":   {s30, review, DefaultBudget, strings.Repeat("s", 20) + h(s30) + "__add_pul" + h(review)},
		"long server whole":  {s30, "read", DefaultBudget, s30 + "__read"},
		"longest server":     {s64, "t", DefaultBudget, strings.Repeat("s", 20) + h(s64) + "__t" + h("t")},
		"cut ends in _":      {under, review, DefaultBudget, strings.Repeat("a", 19) + h(under) + "__add_pull" + h(review)},

		// Other budgets.
		"0 is the default":       {"github", review, 0, "github__add_pull_request_review_commen" + h(review)},
		"smallest budget":        {"github", review, MinBudget, "github__add_pull_re" + h(review)},
		"below it":               {"github", review, 5, "github__add_pull_re" + h(review)},
		"smallest server part":   {"github-enterprise", review, MinBudget, "g" + h("github-enterprise") + "__add_pul" + h(review)},
		"above the spec's limit": {"s", strings.Repeat("y", 126), 500, "s__" + strings.Repeat("y", 128-3-9) + h(strings.Repeat("y", 126))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Project(tc.server, tc.raw, tc.budget)
			if got != tc.want {
				t.Fatalf("Project(%q, %q, %d) =\n  %q\nwant\n  %q", tc.server, tc.raw, tc.budget, got, tc.want)
			}
			if !Valid(got) || len(got) > clamp(tc.budget) {
				t.Fatalf("%q (%d characters) is not a valid tool name within %d", got, len(got), clamp(tc.budget))
			}
		})
	}
	a, b := Project("srv", long+"a", MaxLength), Project("srv", long+"b", MaxLength)
	if a == b || len(a) != MaxLength || !strings.HasPrefix(a, "srv__xxx") {
		t.Fatalf("long names must stay distinct and capped: %q %q", a, b)
	}
}

// The default budget is what 64 characters leave after the longest client prefix; 47 is the
// figure the docs give.
func TestDefaultBudget(t *testing.T) {
	if DefaultBudget != 47 || MinBudget != 28 {
		t.Fatalf("DefaultBudget %d, MinBudget %d: update docs/flags.md and docs/gateway.md", DefaultBudget, MinBudget)
	}
}

// pair is one (server, raw) input.
type pair struct{ server, raw string }

// The properties the projection relies on, for several budgets, over many random sets of
// pairs, including raw names that sanitize alike ("x y", "x_y", "x.y", "x/y"), names around
// the length limit, and servers that are prefixes of each other or too long for the budget:
//   - a pair's name is the same whatever else is in the set (it is computed once per set and
//     compared with a reference computed alone);
//   - distinct pairs get distinct names;
//   - every name is valid and within the budget, and a name that fits is kept;
//   - the server part is recoverable: it ends at the first "__", it is the server's name or
//     (in a changed name) the server's one shortened part, and two servers never share one.
func TestProjectProperties(t *testing.T) {
	for _, budget := range []int{MaxLength, DefaultBudget, 40, MinBudget} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) { checkProperties(t, budget) })
	}
}

func checkProperties(t *testing.T, budget int) {
	rng := rand.New(rand.NewSource(20240601))
	servers := []string{"a", "ab", "a-b", "a_b", "b", "gh", "x1", "my-server", "S",
		strings.Repeat("s", 64), strings.Repeat("s", 63) + "t", "a_b_c", "a-_-b",
		strings.Repeat("s", 29), strings.Repeat("s", 30), strings.Repeat("s", 19) + "_t" + strings.Repeat("u", 20)}
	stems := []string{"x y", "x_y", "x.y", "x/y", "x-y", "x__y", "x", "x_", "_x", "", " ", "_",
		"tool", "Tool", "tööl", "t\xffl", "get:item", "get_item", "a__b", "b__c"}
	alphabet := "abxy_-. /:é\x00"
	randomRaw := func() string {
		switch rng.Intn(4) {
		case 0:
			return stems[rng.Intn(len(stems))]
		case 1: // around the length limit, sharing a long common prefix
			n := budget/3 + rng.Intn(budget)
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
			reference[pair{s, r}] = Project(s, r, budget)
		}
	}
	partOf := map[string]string{} // server part → server
	for round := 0; round < 2000; round++ {
		set := map[pair]bool{}
		for n := 1 + rng.Intn(40); n > 0; n-- {
			set[pair{servers[rng.Intn(len(servers))], randomRaw()}] = true
		}
		byName := map[string]pair{}
		for p := range set {
			name := Project(p.server, p.raw, budget)
			if ref, ok := reference[p]; ok && ref != name {
				t.Fatalf("round %d: %q/%q is %q in this set but %q alone", round, p.server, p.raw, name, ref)
			}
			reference[p] = name
			if !Valid(name) || len(name) > budget {
				t.Fatalf("round %d: %q/%q gives %q, invalid or over %d", round, p.server, p.raw, name, budget)
			}
			if kept := p.server + Separator + p.raw; valid(p.raw) && len(kept) <= budget && name != kept {
				t.Fatalf("round %d: %q fits in %d but became %q", round, kept, budget, name)
			}
			part, _, _ := strings.Cut(name, Separator)
			if part != p.server && part != serverPart(p.server, budget) {
				t.Fatalf("round %d: %q/%q gives %q, whose server part is neither the server nor its shortened part", round, p.server, p.raw, name)
			}
			if other, ok := partOf[part]; ok && other != p.server {
				t.Fatalf("servers %q and %q share the server part %q", p.server, other, part)
			}
			partOf[part] = p.server
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
