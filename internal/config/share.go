package config

import (
	"fmt"
	"slices"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// shares are the values of a server's "share", from the widest scope to the narrowest.
var shares = []string{
	string(v1alpha1.ShareProject), string(v1alpha1.SharePrincipal),
	string(v1alpha1.ShareSession), string(v1alpha1.ShareWorktree),
}

// share reads a server's "share": whose sessions share one of its connections. A value
// outside the four is refused at its place, naming it and the server, with the nearest
// scope when it looks like a typo.
func (p *parser) share(f member, server string) v1alpha1.Share {
	what := fmt.Sprintf("%q in server %q", f.key, server)
	if !p.expectKind(f.value, kindString, what) {
		return ""
	}
	v := f.value.str
	if slices.Contains(shares, v) {
		return v1alpha1.Share(v)
	}
	msg := fmt.Sprintf("%s is %q; the scopes are %s", what, shorten(v), quoteList(shares))
	if s := nearest(v, shares); s != "" {
		msg = fmt.Sprintf("%s is %q; did you mean %q? (the scopes are %s)", what, shorten(v), s, quoteList(shares))
	}
	p.errorf(f.value.at, "%s", msg)
	return ""
}
