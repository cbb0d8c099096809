package access

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/peer"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// localRequest is a loopback request whose caller the OS named as uid (known false: it could
// not say), as a gateway server's connection context or a replica's proxy says.
func localRequest(uid int, known bool) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8484/projects/ns/p/mcp", nil)
	r.RemoteAddr = "127.0.0.1:50000"
	return r.WithContext(peer.WithUID(r.Context(), uid, known))
}

// Local mode admits the controller's own user alone: another local user, or a caller the OS
// cannot name, is refused with a message naming the uid and the flag that admits it; the
// flags widen it. A request a replica proxied carries its client's uid, and is judged by it.
func TestLocalRuleAdmitsItsOwnUser(t *testing.T) {
	own, other := os.Getuid(), os.Getuid()+4242
	for _, tc := range []struct {
		name      string
		rule      LocalRule
		uid       int
		known     bool
		principal string   // "" for refused
		says      []string // in the refusal
	}{
		{"the controller's own user", LocalRule{}, own, true, fmt.Sprintf("local:uid:%d", own), nil},
		{"another local user", LocalRule{}, other, true, "", []string{fmt.Sprintf("not uid %d", other), fmt.Sprintf("--local-allow-uid %d", other), "--local-allow-any-uid"}},
		{"a caller the OS cannot name", LocalRule{}, 0, false, "", []string{fmt.Sprintf("its own user (uid %d)", own), "does not say which user", "--local-allow-any-uid"}},
		{"another user, named", LocalRule{UIDs: []int{other}}, other, true, fmt.Sprintf("local:uid:%d", other), nil},
		{"a third user, not named", LocalRule{UIDs: []int{other}}, other + 1, true, "", []string{fmt.Sprintf("--local-allow-uid %d", other+1)}},
		{"another user, every user admitted", LocalRule{AnyUID: true}, other, true, fmt.Sprintf("local:uid:%d", other), nil},
		{"a caller the OS cannot name, every user admitted", LocalRule{AnyUID: true}, 0, false, "local", nil},
	} {
		principal, status, msg := tc.rule.Authorize(localRequest(tc.uid, tc.known))
		switch {
		case tc.principal != "" && (status != 0 || principal != tc.principal):
			t.Errorf("%s: %d %q as %q, want admitted as %q", tc.name, status, msg, principal, tc.principal)
		case tc.principal == "" && status != http.StatusForbidden:
			t.Errorf("%s: %d as %q, want 403", tc.name, status, principal)
		}
		for _, want := range tc.says {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q lacks %q", tc.name, msg, want)
			}
		}
	}
	// A replica proxying a request says its client's uid (internal/buckets), over whatever its
	// own connection was named: the client is judged.
	proxied := func(client int) *http.Request {
		r := localRequest(own, true) // the proxying replica's connection: the controller's user
		return r.WithContext(peer.WithUID(r.Context(), client, true))
	}
	if _, status, _ := (LocalRule{}).Authorize(proxied(other)); status != http.StatusForbidden {
		t.Errorf("another user's request proxied by a replica: %d, want 403", status)
	}
	if principal, status, _ := (LocalRule{}).Authorize(proxied(own)); status != 0 || principal != fmt.Sprintf("local:uid:%d", own) {
		t.Errorf("the controller's user's request proxied by a replica: %d as %q", status, principal)
	}
	// Loopback callers with a loopback Host only, whoever they are.
	r := localRequest(own, true)
	r.RemoteAddr = "192.0.2.1:50000"
	if _, status, _ := (LocalRule{AnyUID: true}).Authorize(r); status != http.StatusForbidden {
		t.Errorf("a caller from another address: %d, want 403", status)
	}
	r = localRequest(own, true)
	r.Host = "attacker.example:8484"
	if _, status, _ := (LocalRule{AnyUID: true}).Authorize(r); status != http.StatusForbidden {
		t.Errorf("a Host that is not a loopback name: %d, want 403", status)
	}
}

// Over real loopback connections, served by a server that gives its requests no peer context
// (as a test's would): the kernel names the caller, the controller's own user is admitted and,
// where the test may make another user's socket, that user is refused.
func TestLocalRuleOverRealConnections(t *testing.T) {
	if !peer.CanName() {
		t.Skip("this system does not name the user at the other end of a loopback connection")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		principal, status, msg := LocalRule{}.Authorize(r)
		if status != 0 {
			http.Error(w, msg, status)
			return
		}
		fmt.Fprint(w, principal)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("local:uid:%d", os.Getuid()); resp.StatusCode != http.StatusOK || string(body) != want {
		t.Fatalf("the controller's own user: %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	if !testutil.CanDialAsUser() {
		t.Skip("making another user's socket needs CAP_SETUID")
	}
	const other = 5242
	u, _ := url.Parse(srv.URL)
	c, err := testutil.DialAsUser(other, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.Host)
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), fmt.Sprintf("--local-allow-uid %d", other)) {
		t.Fatalf("another local user (uid %d): %d %q, want 403 naming the flag that admits it", other, resp.StatusCode, body)
	}
}
