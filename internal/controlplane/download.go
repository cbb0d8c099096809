package controlplane

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/mod/semver"
	"sigs.k8s.io/controller-runtime/tools/setup-envtest/remote"
	"sigs.k8s.io/controller-runtime/tools/setup-envtest/versions"
)

// Deadlines of the download: reaching the release index tells whether the network allows it at
// all, and must be quick, since a network that only reaches the Go module proxy is common; the
// archive itself (about 100 MB) may take longer.
const (
	indexTimeout   = 15 * time.Second
	archiveTimeout = 5 * time.Minute
)

// downloadOrBuild fills dir with kube-apiserver and etcd: the release archive setup-envtest
// uses when the network reaches it, else a build from the Go module proxy.
func downloadOrBuild(ctx context.Context, version, dir string, skipDownload bool, r *reporter) error {
	if !skipDownload {
		err := download(ctx, version, dir, r)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.printf("no download (%v); building from the Go module proxy instead", err)
	}
	return build(ctx, version, dir, r)
}

// download fetches setup-envtest's archive for version and this platform, checks its SHA-512
// against the index and unpacks the two binaries into dir.
func download(ctx context.Context, version, dir string, r *reporter) error {
	if semver.Prerelease(version) != "" {
		return fmt.Errorf("no archives are published for pre-release %s", version)
	}
	var v versions.Concrete
	if _, err := fmt.Sscanf(version, "v%d.%d.%d", &v.Major, &v.Minor, &v.Patch); err != nil {
		return fmt.Errorf("version %s: %w", version, err)
	}
	platform := versions.PlatformItem{Platform: versions.Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}}
	client := &remote.HTTPClient{Log: logr.Discard(), IndexURL: remote.DefaultIndexURL}

	r.printf("looking for a published envtest archive of Kubernetes %s (%s/%s)", version, runtime.GOOS, runtime.GOARCH)
	indexCtx, cancel := context.WithTimeout(ctx, indexTimeout)
	err := client.FetchSum(indexCtx, v, &platform) // sets the archive's checksum
	cancel()
	if err != nil {
		return err
	}

	archive, err := os.CreateTemp(dir, "envtest-*.tar.gz")
	if err != nil {
		return err
	}
	defer os.Remove(archive.Name())
	defer archive.Close()
	r.printf("downloading it (about 100 MB)")
	getCtx, cancel := context.WithTimeout(ctx, archiveTimeout)
	err = client.GetVersion(getCtx, v, platform, archive)
	cancel()
	if err != nil {
		return err
	}
	if _, err := archive.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return unpack(archive, dir)
}

// unpack writes the archive's kube-apiserver and etcd into dir; the archive's other files
// (kubectl) are not needed, and a build provides only these two.
func unpack(archive io.Reader, dir string) error {
	gz, err := gzip.NewReader(archive)
	if err != nil {
		return fmt.Errorf("unpacking the envtest archive: %w", err)
	}
	tr := tar.NewReader(gz)
	found := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("unpacking the envtest archive: %w", err)
		}
		name := filepath.Base(h.Name)
		if h.Typeflag != tar.TypeReg || !slices.Contains(binaries, name) {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("unpacking %s from the envtest archive: %w", name, err)
		}
		found++
	}
	if found != len(binaries) {
		return errors.New("the envtest archive lacks kube-apiserver or etcd")
	}
	return nil
}
