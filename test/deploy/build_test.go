//go:build deploy

// The tests behind `make test-deploy`: they compile the image's binary as the Dockerfile does
// and build the helm CLI, which takes minutes on a cold build cache, so `make test` leaves them
// out (the build tag) and CI runs both.

package deploy

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

var (
	imageBinaryOnce sync.Once
	imageBinaryPath string
	imageBinaryErr  string
	imageBinaryDir  string
)

// TestMain removes the binary built for the package's tests, and gives envtest's logs a logger
// (without one controller-runtime complains, with a stack trace, after 30 s).
func TestMain(m *testing.M) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	code := m.Run()
	if imageBinaryDir != "" {
		_ = os.RemoveAll(imageBinaryDir)
	}
	os.Exit(code)
}

// imageBinary is projectmcp compiled by the Dockerfile's own build command (its environment,
// flags and package, the output moved to a temporary directory), built once per test run.
func imageBinary(t testing.TB) string {
	t.Helper()
	imageBinaryOnce.Do(func() {
		b := buildStage(t, dockerfile(t))
		dir, err := os.MkdirTemp("", "projectmcp-image-")
		if err != nil {
			imageBinaryErr = err.Error()
			return
		}
		imageBinaryDir = dir
		out := filepath.Join(dir, "projectmcp")
		cmd := exec.Command("go", b.Args(out)...)
		cmd.Dir = root(t)
		cmd.Env = os.Environ()
		for k, v := range b.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if msg, err := cmd.CombinedOutput(); err != nil {
			imageBinaryErr = "go " + strings.Join(b.Args(out), " ") + ": " + err.Error() + "\n" + string(msg)
			return
		}
		imageBinaryPath = out
	})
	if imageBinaryErr != "" {
		t.Fatal(imageBinaryErr)
	}
	return imageBinaryPath
}

// The Dockerfile's build command compiles, and the result is static: it loads no shared
// library and has no ELF interpreter, so it runs on distroless/static, which has neither.
func TestImageBinaryIsStatic(t *testing.T) {
	bin := imageBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the image's binary has an ELF interpreter: it is dynamically linked")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the image's binary loads %q (%v)", libs, err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--help")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "controller") {
		t.Errorf("projectmcp --help: %v\n%s", err, out.String())
	}
}

// config/manager's arguments are ones the image's binary accepts: `projectmcp controller ARGS
// --help` parses every flag (and its value) before printing help, so a misspelt flag or a bad
// value fails here rather than in a crash-looping pod.
func TestManifestArgsParse(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root(t), "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	_, c, err := Controller(objs)
	if err != nil {
		t.Fatal(err)
	}
	checkArgsParse(t, imageBinary(t), c.Args)
}

// checkArgsParse runs the binary with the container's args and --help: exit 0 means every
// flag and value parsed. A flag the binary lacks must fail the same way, or the check proves
// nothing.
func checkArgsParse(t testing.TB, bin string, args []string) {
	t.Helper()
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	}
	if code, out := run(append(slices.Clone(args), "--help")...); code != 0 {
		t.Errorf("projectmcp %s --help exited %d: the binary refuses these args\n%s", strings.Join(args, " "), code, out)
	}
	if code, _ := run(append(slices.Clone(args), "--no-such-flag", "--help")...); code == 0 {
		t.Error("an unknown flag before --help did not fail: the args check proves nothing")
	}
}
