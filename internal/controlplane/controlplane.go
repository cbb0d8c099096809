// Package controlplane finds the kube-apiserver and etcd binaries that envtest runs, for the
// tests and for `projectmcp dev`: KUBEBUILDER_ASSETS, or hack/envtest-assets.sh, which builds
// them from the Go module proxy once and caches them outside the repository.
package controlplane

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
)

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

// Assets returns the directory holding kube-apiserver and etcd.
func Assets(root string) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "hack", "envtest-assets.sh"))
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/envtest-assets.sh: %w", err)
	}
	return strings.TrimSpace(out.String()), nil
}

// FindAssets locates kube-apiserver and etcd for a control plane outside the tests
// (`projectmcp dev`): KUBEBUILDER_ASSETS, else the cache hack/envtest-assets.sh fills, else that
// script itself when a projectmcp checkout is found above the working directory.
func FindAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	if v := apiVersion(); v != "" {
		data := os.Getenv("XDG_DATA_HOME")
		if data == "" {
			home, _ := os.UserHomeDir()
			data = filepath.Join(home, ".local", "share")
		}
		dir := filepath.Join(data, "projectmcp", "envtest", "v1."+strings.TrimPrefix(v, "v0."))
		if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err == nil {
			return dir, nil
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("no kube-apiserver found: set KUBEBUILDER_ASSETS, or run `make envtest` in the projectmcp checkout once")
	}
	return Assets(root)
}

// apiVersion is the k8s.io/api version this binary was built with.
func apiVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range info.Deps {
		if d.Path == "k8s.io/api" {
			return d.Version
		}
	}
	return ""
}
