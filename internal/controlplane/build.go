package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// tickEvery is how often a running build says how long it has taken so far.
var tickEvery = 30 * time.Second

// ErrNoGo is returned, wrapped in advice, when a build is needed and no Go toolchain is found.
var ErrNoGo = errors.New("no Go toolchain")

// build compiles kube-apiserver and etcd for version into dir with the Go toolchain on PATH,
// each in a throwaway module in the system's temporary directory, never inside a checkout:
//
//   - kube-apiserver: a module requiring k8s.io/kubernetes at version. That module's go.mod
//     points its staging modules (k8s.io/api, k8s.io/apiserver, ...) at ./staging/..., which
//     only exists in a Kubernetes checkout, so each is replaced by its published version
//     (v0.M.P for v1.M.P). The version package is stamped as the release build does, or the
//     server would report v0.0.0 and clients would see a nonsense server version.
//   - etcd: a module whose main calls etcdmain.Main, at the etcd server version
//     k8s.io/kubernetes itself requires.
func build(ctx context.Context, version, dir string, r *reporter) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("%w: kube-apiserver and etcd %s are neither cached nor downloadable here, and building them needs Go, but no `go` is on PATH. "+
			"Install Go (https://go.dev/dl/) and put its bin directory on PATH, or set KUBEBUILDER_ASSETS to a directory holding kube-apiserver and etcd (for example from `setup-envtest use -p path %s` on a machine that can download)",
			ErrNoGo, version, strings.TrimPrefix(version, "v"))
	}
	work, err := os.MkdirTemp("", "projectmcp-envtest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	b := &goBuild{gobin: gobin, env: buildEnv()}
	goVersion, err := b.run(ctx, work, "env", "GOVERSION")
	if err != nil {
		return err
	}

	r.printf("building kube-apiserver %s and etcd with %s from the Go module proxy: 6–20 minutes the first time "+
		"(about a minute when Go's build cache already holds them); the time so far is shown every %s",
		version, strings.TrimSpace(goVersion), tickEvery)
	stop := r.startTicking(tickEvery)
	defer stop()

	apiserver := filepath.Join(work, "kube-apiserver")
	if err := os.Mkdir(apiserver, 0o755); err != nil {
		return err
	}
	r.begin(fmt.Sprintf("fetching k8s.io/kubernetes %s and its dependencies", version))
	if err := b.apiserverModule(ctx, apiserver, version); err != nil {
		return err
	}
	r.begin(fmt.Sprintf("compiling kube-apiserver %s", version))
	minor := strings.SplitN(strings.TrimPrefix(version, "v1."), ".", 2)[0]
	pkg := "k8s.io/component-base/version"
	ldflags := fmt.Sprintf("-s -w -X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=1 -X %[1]s.gitMinor=%[3]s -X %[1]s.gitTreeState=clean", pkg, version, minor)
	if _, err := b.run(ctx, apiserver, "build", "-trimpath", "-ldflags", ldflags,
		"-o", filepath.Join(dir, "kube-apiserver"), "k8s.io/kubernetes/cmd/kube-apiserver"); err != nil {
		return err
	}

	out, err := b.run(ctx, apiserver, "list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/server/v3")
	if err != nil {
		return err
	}
	etcdVersion := strings.TrimSpace(out)
	etcd := filepath.Join(work, "etcd")
	if err := os.Mkdir(etcd, 0o755); err != nil {
		return err
	}
	r.begin(fmt.Sprintf("fetching etcd %s", etcdVersion))
	if err := b.etcdModule(ctx, etcd, etcdVersion); err != nil {
		return err
	}
	r.begin(fmt.Sprintf("compiling etcd %s", etcdVersion))
	if _, err := b.run(ctx, etcd, "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, "etcd"), "."); err != nil {
		return err
	}
	r.printf("built kube-apiserver %s and etcd %s in %s", version, etcdVersion, r.elapsed())
	return nil
}

// buildEnv is the environment of the go commands: the user's (proxy, caches, credentials), but
// never a go.work that would pull the throwaway module into a workspace, no cgo (static
// binaries, no C compiler needed), and this machine's platform even if GOOS/GOARCH are set for
// cross-compiling.
func buildEnv() []string {
	return append(os.Environ(), "GOWORK=off", "GO111MODULE=on", "CGO_ENABLED=0",
		"GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
}

// apiserverModule prepares the module that builds kube-apiserver (see build).
func (b *goBuild) apiserverModule(ctx context.Context, dir, version string) error {
	if _, err := b.run(ctx, dir, "mod", "init", "envtest.local/kube-apiserver"); err != nil {
		return err
	}
	out, err := b.run(ctx, dir, "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	if err != nil {
		return err
	}
	var mod struct{ GoMod, Error string }
	if err := json.Unmarshal([]byte(out), &mod); err != nil {
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w", version, err)
	}
	if mod.Error != "" || mod.GoMod == "" {
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %s", version, mod.Error)
	}
	staging, err := stagingModules(mod.GoMod)
	if err != nil {
		return err
	}
	published := "v0" + strings.TrimPrefix(version, "v1")
	args := []string{"mod", "edit", "-require=k8s.io/kubernetes@" + version}
	for _, m := range staging {
		args = append(args, "-replace="+m+"="+m+"@"+published)
	}
	if _, err := b.run(ctx, dir, args...); err != nil {
		return err
	}
	_, err = b.run(ctx, dir, "get", "k8s.io/kubernetes/cmd/kube-apiserver@"+version)
	return err
}

// stagingModules lists the modules k8s.io/kubernetes's go.mod replaces by ./staging/ folders.
func stagingModules(gomod string) ([]string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(gomod, data, nil)
	if err != nil {
		return nil, err
	}
	var mods []string
	for _, r := range f.Replace {
		if strings.HasPrefix(r.New.Path, "./staging/") {
			mods = append(mods, r.Old.Path)
		}
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%s replaces no staging modules: not the k8s.io/kubernetes layout this build knows", gomod)
	}
	return mods, nil
}

// etcdModule prepares the module that builds etcd (see build).
func (b *goBuild) etcdModule(ctx context.Context, dir, version string) error {
	if !semver.IsValid(version) {
		return fmt.Errorf("k8s.io/kubernetes requires etcd server %q, not a version this build understands", version)
	}
	if _, err := b.run(ctx, dir, "mod", "init", "envtest.local/etcd"); err != nil {
		return err
	}
	const main = `// Command etcd is the etcd server, for envtest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644); err != nil {
		return err
	}
	_, err := b.run(ctx, dir, "get", "go.etcd.io/etcd/server/v3/etcdmain@"+version)
	return err
}

// goBuild runs go commands.
type goBuild struct {
	gobin string
	env   []string
}

// run runs `go args...` in dir and returns its standard output. On failure the error carries
// the end of its standard error, which is where the go command says what went wrong.
func (b *goBuild) run(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, b.gobin, args...)
	cmd.Dir = dir
	cmd.Env = b.env
	// Interrupted, the go command stops its compilers and removes its temporary files; it is
	// killed only if it has not exited after WaitDelay.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		said := stderr.String()
		if strings.TrimSpace(said) == "" {
			said = stdout.String() // go mod download -json reports there
		}
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, tail(said, 30))
	}
	return stdout.String(), nil
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
