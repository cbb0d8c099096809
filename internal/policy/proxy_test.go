package policy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestDomainsAdmit(t *testing.T) {
	for _, tc := range []struct {
		d    Domains
		host string
		ok   bool
	}{
		{Domains{}, "example.com", true},
		{Domains{Allowed: []string{"registry.npmjs.org"}}, "registry.npmjs.org", true},
		{Domains{Allowed: []string{"registry.npmjs.org"}}, "REGISTRY.npmjs.org.", true},
		{Domains{Allowed: []string{"registry.npmjs.org"}}, "evil.org", false},
		{Domains{Allowed: []string{"*.github.com"}}, "api.github.com", true},
		{Domains{Allowed: []string{"*.github.com"}}, "github.com", false},
		{Domains{Allowed: []string{"*.github.com"}}, "evilgithub.com", false},
		{Domains{Allowed: []string{"*.github.com"}, Denied: []string{"gist.github.com"}}, "gist.github.com", false},
		{Domains{Denied: []string{"*.internal"}}, "db.internal", false},
	} {
		if err := tc.d.Admits(tc.host); (err == nil) != tc.ok {
			t.Errorf("%+v admits %s: %v, want %v", tc.d, tc.host, err, tc.ok)
		}
	}
}

// netnsChild marks the test binary re-run inside a network namespace of its own.
const netnsChild = "PROJECTMCP_TEST_NETNS_CHILD"

// The sandbox's proxy refuses a cloud metadata address, whatever the server asks. The test
// runs in a network namespace it makes, where 169.254.169.254 is an address of a dummy
// interface (of its loopback, where the kernel has none) with a listener on it: no packet leaves the machine, and had the proxy dialed,
// the listener would have seen it.
func TestProxyRefusesMetadata(t *testing.T) {
	if os.Getenv(netnsChild) == "" {
		unshare, err := exec.LookPath("unshare")
		if err != nil || os.Geteuid() != 0 {
			t.Skip("making a network namespace needs unshare and root")
		}
		cmd := exec.Command(unshare, "--net", os.Args[0], "-test.run=^TestProxyRefusesMetadata$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), netnsChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("in a network namespace of its own: %v\n%s", err, out)
		}
		return
	}
	dev := "dummy0" // on a kernel without dummy interfaces, the namespace's own loopback
	if exec.Command("ip", "link", "add", dev, "type", "dummy").Run() != nil {
		dev = "lo"
	}
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", "169.254.169.254/32", "dev", dev}, {"link", "set", dev, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	metadata, err := net.Listen("tcp", "169.254.169.254:80")
	if err != nil {
		t.Fatal(err)
	}
	defer metadata.Close()
	reached := make(chan struct{}, 1)
	go func() {
		if c, err := metadata.Accept(); err == nil {
			reached <- struct{}{}
			c.Close()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := NewProxy(nil, Domains{})
	go px.Serve(ln)
	defer px.Close()

	for _, target := range []string{"169.254.169.254:80", "[fd00:ec2::254]:80"} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		status, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || strings.Contains(status, " 200 ") {
			t.Errorf("CONNECT %s: %q %v, want refused", target, status, err)
		}
		// A plain request to it is refused as well.
		c, err = net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET http://%s/latest/meta-data/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		status, err = bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || strings.Contains(status, " 200 ") {
			t.Errorf("GET http://%s/: %q %v, want refused", target, status, err)
		}
	}
	select {
	case <-reached:
		t.Fatal("the proxy connected to the metadata address")
	default:
	}
}
