package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// The local access flags: the controller's own user alone by default, others named by
// --local-allow-uid (repeatable or comma-separated), every one by --local-allow-any-uid; a
// negative uid, or either flag with kubernetes auth, is refused naming the flag.
func TestLocalAccessFlags(t *testing.T) {
	rule, err := parseControllerFlags(t).localRule()
	if err != nil || len(rule.UIDs) != 0 || rule.AnyUID {
		t.Fatalf("defaults: %+v %v, want the controller's own user alone", rule, err)
	}
	rule, err = parseControllerFlags(t, "--local-allow-uid", "1001", "--local-allow-uid", "1002,1003").localRule()
	if err != nil || !slices.Equal(rule.UIDs, []int{1001, 1002, 1003}) || rule.AnyUID {
		t.Fatalf("three uids: %+v %v", rule, err)
	}
	if rule, err = parseControllerFlags(t, "--local-allow-any-uid").localRule(); err != nil || !rule.AnyUID {
		t.Fatalf("--local-allow-any-uid: %+v %v", rule, err)
	}
	if _, err := parseControllerFlags(t, "--local-allow-uid", "-1").localRule(); err == nil || !strings.HasPrefix(err.Error(), "--local-allow-uid") {
		t.Errorf("a negative uid: %v, want an error naming the flag", err)
	}
	for _, args := range [][]string{{"--local-allow-uid", "1001"}, {"--local-allow-any-uid"}} {
		f := parseControllerFlags(t, append([]string{"--gateway-auth", "kubernetes"}, args...)...)
		if _, err := f.localRule(); err == nil || !strings.Contains(err.Error(), "--gateway-auth=local alone") {
			t.Errorf("%q with kubernetes auth: %v, want refused", args, err)
		}
	}
}

// The controller's local gateway admits its own user's processes, and refuses another local
// user's, naming the flag that admits it; with that flag, that user is admitted. The other
// user's connection is a real one, which the kernel names (the test needs root to make it).
func TestLocalGatewayAdmitsItsOwnUser(t *testing.T) {
	env := apiServer(t)
	missing := types.NamespacedName{Namespace: "default", Name: "nowhere"} // 404 once admitted
	const other = 5242
	for _, tc := range []struct {
		args         []string
		otherAllowed bool
	}{{nil, false}, {[]string{"--local-allow-uid", fmt.Sprint(other)}, true}, {[]string{"--local-allow-any-uid"}, true}} {
		var reqs requestCounter
		gw := startGateway(t, env, &reqs, parseControllerFlags(t, tc.args...))
		var status int
		testutil.Eventually(t, 30*time.Second, "the gateway serving", func() bool {
			status, _ = post(t, gw, missing, "")
			return status != 0
		})
		if status != http.StatusNotFound {
			t.Fatalf("%q: the controller's own user (uid %d): %d, want it admitted (404 for the missing project)", tc.args, os.Getuid(), status)
		}
		if !testutil.CanDialAsUser() {
			continue
		}
		status, body := postAsUser(t, other, gw.Endpoint(missing))
		switch {
		case tc.otherAllowed && status != http.StatusNotFound:
			t.Errorf("%q: uid %d: %d %q, want it admitted", tc.args, other, status, body)
		case !tc.otherAllowed && (status != http.StatusForbidden || !strings.Contains(body, fmt.Sprintf("--local-allow-uid %d", other))):
			t.Errorf("%q: uid %d: %d %q, want 403 naming --local-allow-uid %d", tc.args, other, status, body, other)
		}
	}
}

// postAsUser posts a ping to endpoint over a connection of local user uid, and returns the
// status and body.
func postAsUser(t *testing.T, uid int, endpoint string) (int, string) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c, err := testutil.DialAsUser(uid, u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const ping = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		u.Path, u.Host, len(ping), ping)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
