package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// fakeAssets is a directory holding executable kube-apiserver and etcd stand-ins.
func fakeAssets(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// `projectmcp envtest --print-path` prints the directory alone, for $(...); progress goes to
// stderr. Without the flag it says how to use the directory.
func TestEnvtestPrintsAssets(t *testing.T) {
	assets := fakeAssets(t)
	t.Setenv("KUBEBUILDER_ASSETS", assets)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"envtest", "--print-path"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if stdout.String() != assets+"\n" {
		t.Errorf("stdout %q, want only %q", stdout.String(), assets)
	}
	if !strings.Contains(stderr.String(), "control plane: using KUBEBUILDER_ASSETS="+assets) {
		t.Errorf("stderr %q does not say where the binaries come from", stderr.String())
	}

	stdout.Reset()
	if code := run([]string{"envtest"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "export KUBEBUILDER_ASSETS="+assets+"\n") {
		t.Errorf("stdout %q does not say how to use the directory", stdout.String())
	}

	if code := run([]string{"envtest", "extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("an extra argument: exit %d, want 2", code)
	}
}

// With nothing cached, no download and no Go toolchain, envtest fails saying what to install
// or set, and prints no path a caller's $(...) would take.
func TestEnvtestWithoutGo(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("ENVTEST_SKIP_DOWNLOAD", "1")
	t.Setenv("PATH", t.TempDir())
	var stdout, stderr bytes.Buffer
	if code := run([]string{"envtest", "--print-path"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
	for _, want := range []string{"projectmcp envtest: no Go toolchain", "Install Go (https://go.dev/dl/)", "set KUBEBUILDER_ASSETS"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not say %q", stderr.String(), want)
		}
	}
}

// The README's `go install` line names this module's command.
func TestReadmeGoInstall(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	want := "go install " + modfile.ModulePath(data) + "/cmd/projectmcp@latest"
	if !strings.Contains(readme(t), want) {
		t.Errorf("README lacks %q", want)
	}
}

// dev, run where nothing is cached and nothing can be built, fails with the same advice rather
// than pointing at a checkout the user does not have.
func TestDevWithoutGo(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", "")
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("ENVTEST_SKIP_DOWNLOAD", "1")
	t.Setenv("PATH", t.TempDir())
	var stdout, stderr bytes.Buffer
	if code := run([]string{"dev", "--project", t.TempDir()}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"control plane: kube-apiserver and etcd v1.", "projectmcp dev: no Go toolchain", "Install Go (https://go.dev/dl/)"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not say %q", stderr.String(), want)
		}
	}
}
