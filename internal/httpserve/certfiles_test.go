package httpserve

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// CertFiles serves the files' current certificate: a renewed pair is picked up at the next
// handshake, a broken one keeps the last good certificate in service, and files that cannot be
// loaded at the start are refused naming them.
func TestCertFilesReload(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if _, err := LoadCertFiles(certPath, keyPath, logr.Discard()); err == nil || !strings.Contains(err.Error(), certPath) {
		t.Fatalf("missing files: %v, want an error naming %s", err, certPath)
	}
	first := testutil.SelfSignedCert(t, certPath, keyPath)
	files, err := LoadCertFiles(certPath, keyPath, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	files.every = 0 // every handshake looks: the renewals below come at once
	serving := func() *x509.Certificate {
		t.Helper()
		c, err := files.TLSConfig().GetCertificate(nil)
		if err != nil || c == nil || c.Leaf == nil {
			t.Fatalf("GetCertificate: %v %v", c, err)
		}
		return c.Leaf
	}
	if got := serving(); !got.Equal(first) {
		t.Fatalf("serving %v, want the first certificate", got.SerialNumber)
	}
	renewed := testutil.SelfSignedCert(t, certPath, keyPath)
	if got := serving(); !got.Equal(renewed) {
		t.Fatalf("after renewal serving %v, want %v", got.SerialNumber, renewed.SerialNumber)
	}
	if err := os.WriteFile(certPath, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := serving(); !got.Equal(renewed) {
		t.Fatalf("with a broken file serving %v, want the last good %v", got.SerialNumber, renewed.SerialNumber)
	}
	again := testutil.SelfSignedCert(t, certPath, keyPath)
	if got := serving(); !got.Equal(again) {
		t.Fatalf("after the files were mended serving %v, want %v", got.SerialNumber, again.SerialNumber)
	}
	if err := os.WriteFile(keyPath, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCertFiles(certPath, keyPath, logr.Discard()); err == nil || !strings.Contains(err.Error(), keyPath) {
		t.Fatalf("a broken key at the start: %v, want an error naming %s", err, keyPath)
	}
}
