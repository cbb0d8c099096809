// Package controlplane provides the kube-apiserver and etcd binaries that envtest runs, for the
// tests and for `projectmcp dev`, so that an installed projectmcp needs nothing but itself (and a
// Go toolchain the first time). Ensure looks, in this order, at:
//
//  1. KUBEBUILDER_ASSETS, when it names a directory holding both binaries;
//  2. the cache, ${XDG_DATA_HOME:-~/.local/share}/projectmcp/envtest/<Kubernetes version>;
//  3. setup-envtest's release archives, where the network reaches them (a short deadline, so a
//     network that only reaches the Go module proxy costs seconds; ENVTEST_SKIP_DOWNLOAD=1
//     skips this step);
//  4. a build from the Go module proxy with the `go` on PATH, in a temporary module outside any
//     checkout: kube-apiserver from k8s.io/kubernetes and etcd from go.etcd.io/etcd/server/v3.
//
// The Kubernetes version is the one this binary was compiled against: its build info records
// k8s.io/api v0.M.P, which ships with Kubernetes v1.M.P, so the API server always matches the
// client libraries in use.
//
// Steps 3 and 4 fill the cache under a file lock, in a temporary directory next to it that is
// renamed into place only when both binaries work: a second process started meanwhile waits
// for the lock and then finds the finished cache; a build that is killed leaves only a
// temporary directory, removed by the next one.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// Options configure Ensure. The zero value is what `projectmcp dev` uses: the binary's own
// Kubernetes version, the default cache, no progress output.
type Options struct {
	// CacheDir holds one directory per Kubernetes version. Default:
	// ${XDG_DATA_HOME:-~/.local/share}/projectmcp/envtest.
	CacheDir string
	// KubernetesVersion ("v1.37.2") overrides the version taken from the binary's build info.
	KubernetesVersion string
	// Progress receives what is being done, for a person to follow: a cold build takes many
	// minutes. Nil discards it.
	Progress io.Writer
	// SkipDownload goes straight to the build (also set by ENVTEST_SKIP_DOWNLOAD=1).
	SkipDownload bool

	// fill replaces download-then-build in tests of the locking and caching around it.
	fill func(ctx context.Context, version, dir string, r *reporter) error
}

// Binaries Ensure provides; a directory is complete when it holds both as executable files.
var binaries = []string{"kube-apiserver", "etcd"}

// DefaultCacheDir is ${XDG_DATA_HOME:-~/.local/share}/projectmcp/envtest.
func DefaultCacheDir() (string, error) {
	data := os.Getenv("XDG_DATA_HOME")
	if data == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("cannot place the control plane cache: %w (set XDG_DATA_HOME or KUBEBUILDER_ASSETS)", err)
		}
		data = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(data, "projectmcp", "envtest"), nil
}

// Ensure returns a directory holding kube-apiserver and etcd, getting them first if needed
// (see the package documentation for where from).
func Ensure(ctx context.Context, opts Options) (string, error) {
	r := newReporter(opts.Progress)
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		if complete(dir) {
			r.printf("using KUBEBUILDER_ASSETS=%s", dir)
			return dir, nil
		}
		r.printf("KUBEBUILDER_ASSETS=%s lacks kube-apiserver or etcd; looking elsewhere", dir)
	}
	version := opts.KubernetesVersion
	if version == "" {
		var err error
		if version, err = BuiltVersion(); err != nil {
			return "", err
		}
	} else if !isRelease(version, "v1") {
		return "", fmt.Errorf("Kubernetes version %q: want a release, v1.MINOR.PATCH", version)
	}
	root := opts.CacheDir
	if root == "" {
		var err error
		if root, err = DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	final := filepath.Join(root, version)
	if complete(final) {
		r.printf("kube-apiserver and etcd %s from %s", version, final)
		return final, nil
	}

	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("creating the control plane cache: %w", err)
	}
	unlock, locked, err := lock(ctx, filepath.Join(root, "."+version+".lock"), func() {
		r.printf("another projectmcp is getting kube-apiserver and etcd %s into %s; waiting for it", version, final)
	})
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(final) { // filled by the process this one waited for
		r.printf("kube-apiserver and etcd %s from %s", version, final)
		return final, nil
	}
	if locked {
		removeStale(root, version)
	}

	tmp, err := os.MkdirTemp(root, tmpPrefix(version))
	if err != nil {
		return "", fmt.Errorf("creating the control plane cache: %w", err)
	}
	defer os.RemoveAll(tmp) // gone already once renamed into place
	r.printf("kube-apiserver and etcd %s are not in %s yet: getting them once, later runs start in seconds", version, final)
	fill := opts.fill
	if fill == nil {
		skip := opts.SkipDownload || os.Getenv("ENVTEST_SKIP_DOWNLOAD") == "1"
		fill = func(ctx context.Context, version, dir string, r *reporter) error {
			return downloadOrBuild(ctx, version, dir, skip, r)
		}
	}
	if err := fill(ctx, version, tmp, r); err != nil {
		return "", err
	}
	if err := verify(ctx, tmp, version); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it private
		return "", err
	}
	if err := install(tmp, final); err != nil {
		return "", err
	}
	r.printf("cached kube-apiserver and etcd %s in %s", version, final)
	return final, nil
}

// tmpPrefix names the directories a fill works in, next to the cache so that the final rename
// stays on one file system.
func tmpPrefix(version string) string { return ".tmp-" + version + "-" }

// removeStale removes what killed fills left behind. Only the lock holder calls it: nobody else
// can be filling then.
func removeStale(root, version string) {
	stale, _ := filepath.Glob(filepath.Join(root, tmpPrefix(version)+"*"))
	for _, dir := range stale {
		_ = os.RemoveAll(dir)
	}
}

// install renames the filled directory into place. An incomplete directory already there (an
// earlier, non-atomic cache filler interrupted halfway) is moved aside first. Where there is no
// lock, another process may have won the race: its complete directory is kept.
func install(tmp, final string) error {
	if _, err := os.Stat(final); err == nil && !complete(final) {
		aside := tmp + ".old"
		if err := os.Rename(final, aside); err != nil {
			return fmt.Errorf("replacing the incomplete %s: %w", final, err)
		}
		defer os.RemoveAll(aside)
	}
	if err := os.Rename(tmp, final); err != nil {
		if complete(final) {
			return nil
		}
		return fmt.Errorf("caching the control plane binaries: %w", err)
	}
	return nil
}

// complete reports whether dir holds kube-apiserver and etcd as executable files.
func complete(dir string) bool {
	for _, name := range binaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// verify runs each binary with --version before it is cached, so that a broken build or a
// truncated download never becomes the cache every later run trusts.
func verify(ctx context.Context, dir, version string) error {
	if !complete(dir) {
		return fmt.Errorf("getting the control plane binaries: %s lacks kube-apiserver or etcd afterwards", dir)
	}
	want := map[string]string{"kube-apiserver": "Kubernetes " + version, "etcd": "etcd Version:"}
	for _, name := range binaries {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := exec.CommandContext(ctx, filepath.Join(dir, name), "--version").CombinedOutput()
		cancel()
		if err != nil || !strings.Contains(string(out), want[name]) {
			return fmt.Errorf("the %s just obtained does not work: `%s --version` said %q (%v); want %q",
				name, name, strings.TrimSpace(string(out)), err, want[name])
		}
	}
	return nil
}

// BuiltVersion is the Kubernetes release matching the k8s.io/api this binary was compiled
// with.
func BuiltVersion() (string, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", errors.New("cannot tell which Kubernetes version to run: this binary carries no build info; set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd")
	}
	for _, d := range info.Deps {
		if d.Path != "k8s.io/api" {
			continue
		}
		v := d.Version
		if d.Replace != nil && d.Replace.Version != "" {
			v = d.Replace.Version
		}
		return KubernetesVersionFor(v)
	}
	return "", errors.New("cannot tell which Kubernetes version to run: this binary's build info does not list k8s.io/api ; set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd")
}

// KubernetesVersionFor maps a k8s.io/api module version to the Kubernetes release it is
// published with: v0.M.P (or v0.M.P-rc.N) → v1.M.P.
func KubernetesVersionFor(api string) (string, error) {
	if !isRelease(api, "v0") {
		return "", fmt.Errorf("k8s.io/api %q matches no Kubernetes release (want a tagged v0.MINOR.PATCH); set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd", api)
	}
	return "v1" + strings.TrimPrefix(api, "v0"), nil
}

// isRelease reports whether v is a tagged semantic version (a pre-release like -rc.1 allowed)
// with the given major version, written out in full.
func isRelease(v, major string) bool {
	return semver.IsValid(v) && semver.Major(v) == major && v == semver.Canonical(v) && !module.IsPseudoVersion(v)
}

// VersionFromGoMod is the Kubernetes release matching the k8s.io/api that the go.mod at path
// requires: what a binary built from that module will ask for.
func VersionFromGoMod(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	f, err := modfile.ParseLax(path, data, nil)
	if err != nil {
		return "", err
	}
	for _, r := range f.Require {
		if r.Mod.Path == "k8s.io/api" {
			return KubernetesVersionFor(r.Mod.Version)
		}
	}
	return "", fmt.Errorf("%s does not require k8s.io/api", path)
}

// RepoRoot finds the repository root: the nearest directory upwards holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
