package main

import (
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/share"
)

// docs/sharing.md's table of servers known to keep state per client is internal/share's, row
// for row and in its order, so the page never names a server the code does not know, nor
// leaves one out.
func TestSharingTableIsTheCodes(t *testing.T) {
	var rows [][]string
	for _, tbl := range readmeTables(docPage(t, "docs/sharing.md")) {
		if len(tbl.header) == 2 && tbl.header[0] == "server" {
			rows = tbl.rows
		}
	}
	table := share.Table()
	if len(rows) != len(table) {
		t.Fatalf("docs/sharing.md's table has %d rows, internal/share's %d", len(rows), len(table))
	}
	for i, e := range table {
		name, why := strings.Trim(rows[i][0], "`"), rows[i][1]
		if name != e.Name || why != e.Why {
			t.Errorf("docs/sharing.md's row %d: %q, %q; the code's: %q, %q", i+1, name, why, e.Name, e.Why)
		}
	}
}

// A controller whose gateway checks bearer tokens serves sessions of other machines, so it
// refuses share "worktree"; one serving loopback callers (local mode, projectmcp dev's) keeps it.
func TestGatewayAuthDecidesRemoteSessions(t *testing.T) {
	for auth, remote := range map[string]bool{"local": false, "kubernetes": true} {
		d, err := parseControllerFlags(t, "--gateway-auth", auth).connDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if d.RemoteSessions != remote {
			t.Errorf("--gateway-auth %s: RemoteSessions %v, want %v", auth, d.RemoteSessions, remote)
		}
	}
}
