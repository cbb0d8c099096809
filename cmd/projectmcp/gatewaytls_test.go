package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// With --gateway-tls-cert and --gateway-tls-key the gateway serves HTTPS: status.endpoint is
// an https:// URL, an agent trusting the certificate calls a tool through it, a plain HTTP
// request is refused, and a renewed certificate (the files replaced, as cert-manager and the
// kubelet do) is served at the next handshake without a restart.
func TestGatewayTLS(t *testing.T) {
	env := apiServer(t)
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := testutil.SelfSignedCert(t, certPath, keyPath)

	p := startMain(t, dir, nil, os.Args[0], "controller", "--kubeconfig", env.Kubeconfig, "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--gateway-bind-address", "127.0.0.1:0",
		"--gateway-tls-cert", certPath, "--gateway-tls-key", keyPath)
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: "default"},
		Spec: v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{fixtureServer("a")}}}
	env.DeleteOnCleanup(t, obj)
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyOK(t, 60*time.Second, "Ready", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if obj.Status.ReadyServers != "1/1" {
			return fmt.Errorf("status %+v", obj.Status)
		}
		return nil
	})
	endpoint := obj.Status.Endpoint
	if !strings.HasPrefix(endpoint, "https://127.0.0.1:") {
		t.Fatalf("status.endpoint %q, want https://127.0.0.1:<port>/...", endpoint)
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(cctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: trusting(first)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := session.CallTool(cctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "over TLS"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "over TLS" {
		t.Fatalf("a call over TLS: %+v %v", res, err)
	}
	_ = session.Close()

	plain := strings.Replace(endpoint, "https://", "http://", 1)
	resp, err := http.Post(plain, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("plain HTTP to the gateway: %v, want an answer saying it speaks HTTPS", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
		t.Errorf("plain HTTP to the gateway: %d %q, want 400 naming HTTPS", resp.StatusCode, body)
	}

	renewed := testutil.SelfSignedCert(t, certPath, keyPath)
	testutil.EventuallyOK(t, 10*time.Second, "the renewed certificate served", func() error {
		got, err := servedCert(endpoint, renewed)
		if err != nil {
			return err
		}
		if !got.Equal(renewed) {
			return errors.New("still the old certificate")
		}
		return nil
	})
	if _, err := servedCert(endpoint, first); err == nil {
		t.Errorf("a client trusting only the replaced certificate still completed a handshake")
	}
	if strings.Contains(p.out.String(), "BEGIN") {
		t.Errorf("the controller's output holds PEM text")
	}
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("the controller exited %d on SIGTERM", code)
	}
}

// trusting is an HTTP client that trusts cert alone.
func trusting(cert *x509.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// servedCert completes a TLS handshake with the gateway of endpoint, trusting cert alone, and
// returns the certificate the gateway presented.
func servedCert(endpoint string, cert *x509.Certificate) (*x509.Certificate, error) {
	host := strings.TrimPrefix(endpoint, "https://")
	host, _, _ = strings.Cut(host, "/")
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	conn, err := tls.Dial("tcp", host, &tls.Config{RootCAs: pool})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// --gateway-url must name the scheme the gateway serves, and the TLS flags go together.
func TestGatewayURLAndTLSFlags(t *testing.T) {
	for _, tc := range []struct {
		flag, bound string
		tls         bool
		want, err   string
	}{
		{"", "127.0.0.1:8484", false, "http://127.0.0.1:8484", ""},
		{"", "127.0.0.1:8484", true, "https://127.0.0.1:8484", ""},
		{"https://mcp.example.com", ":8484", true, "https://mcp.example.com", ""},
		{"http://projectmcp-gateway.projectmcp-system.svc:8484", ":8484", false, "http://projectmcp-gateway.projectmcp-system.svc:8484", ""},
		{"https://mcp.example.com", ":8484", false, "https://mcp.example.com", ""}, // TLS ended in front of the gateway
		{"http://mcp.example.com", ":8484", true, "", `--gateway-url "http://mcp.example.com": the gateway serves HTTPS (--gateway-tls-cert), so the URL must be https://`},
		{"mcp.example.com", ":8484", false, "", `--gateway-url "mcp.example.com": want an http:// or https:// URL with a host`},
		{"ftp://mcp.example.com", ":8484", false, "", `--gateway-url "ftp://mcp.example.com": want an http:// or https:// URL with a host`},
	} {
		got, err := gatewayBaseURL(tc.flag, tc.bound, tc.tls)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("%q tls=%v: %q %v, want the error %q", tc.flag, tc.tls, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%q tls=%v: %q %v, want %q", tc.flag, tc.tls, got, err, tc.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "tls.crt")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gateway-tls-cert", missing}, "--gateway-tls-cert and --gateway-tls-key go together"},
		{[]string{"--gateway-tls-key", missing}, "--gateway-tls-cert and --gateway-tls-key go together"},
		{[]string{"--gateway-tls-cert", missing, "--gateway-tls-key", missing}, missing},
	} {
		if _, err := parseControllerFlags(t, tc.args...).gatewayTLS(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
