package httpserve

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// CertFiles serves the certificate and key of two PEM files, reloaded when either changes
// (cert-manager and the kubelet replace a Secret's files as the certificate is renewed): every
// handshake checks, at most once a CheckInterval, whether the files were replaced or rewritten,
// and reads them again if so; a flood of handshakes costs no more file system calls than one.
// A pair that fails to load keeps the last good one in service.
type CertFiles struct {
	certPath, keyPath string
	log               logr.Logger

	every time.Duration // how often handshakes look at the files (CheckInterval)

	mu      sync.Mutex
	checked time.Time // when a handshake last looked
	stamp   [2]os.FileInfo
	cert    *tls.Certificate
	// failing is set while the files cannot be loaded (said once, until they can again).
	failing bool
}

// CheckInterval is how often handshakes look whether the certificate files changed.
const CheckInterval = time.Second

// LoadCertFiles loads the pair once, so that a bad file is refused at startup with its path.
func LoadCertFiles(certPath, keyPath string, log logr.Logger) (*CertFiles, error) {
	c := &CertFiles{certPath: certPath, keyPath: keyPath, log: log, every: CheckInterval}
	stamp, err := c.stamps()
	if err == nil {
		err = c.load(stamp)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// TLSConfig is a server configuration whose certificate is the files' current one.
func (c *CertFiles) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}

// GetCertificate is the current certificate, reloaded first if the files changed.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Sub(c.checked) < c.every {
		return c.cert, nil
	}
	c.checked = now
	stamp, err := c.stamps()
	if err == nil && changed(c.stamp, stamp) {
		if err = c.load(stamp); err != nil {
			c.stamp = stamp // said once per change of the files, not at every handshake
		}
	}
	if err != nil && !c.failing {
		c.log.Error(err, "Keeping the gateway's previous TLS certificate")
	}
	c.failing = err != nil
	return c.cert, nil
}

// stamps are the files' states, through symbolic links (a Secret volume's files are links
// into the directory the kubelet swaps).
func (c *CertFiles) stamps() ([2]os.FileInfo, error) {
	var out [2]os.FileInfo
	for i, path := range []string{c.certPath, c.keyPath} {
		info, err := os.Stat(path)
		if err != nil {
			return out, fmt.Errorf("gateway TLS: %w", err)
		}
		out[i] = info
	}
	return out, nil
}

// changed reports whether a file was replaced (another file), rewritten (its time) or grown.
func changed(was, is [2]os.FileInfo) bool {
	for i := range was {
		if !os.SameFile(was[i], is[i]) || !was[i].ModTime().Equal(is[i].ModTime()) || was[i].Size() != is[i].Size() {
			return true
		}
	}
	return false
}

// load reads the pair; stamp is taken before reading, so that a change during the read is
// seen by the next handshake.
func (c *CertFiles) load(stamp [2]os.FileInfo) error {
	cert, err := tls.LoadX509KeyPair(c.certPath, c.keyPath)
	if err != nil {
		return fmt.Errorf("gateway TLS: certificate %s and key %s: %w", c.certPath, c.keyPath, err)
	}
	c.cert, c.stamp = &cert, stamp
	return nil
}
