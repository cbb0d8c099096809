package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// root is the repository's top directory.
func root(t testing.TB) string {
	t.Helper()
	dir, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// dockerfile parses the repository's Dockerfile.
func dockerfile(t testing.TB) *Dockerfile {
	t.Helper()
	d, err := ParseDockerfileFile(filepath.Join(root(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// makeDryRun is what `make -n TARGET` would run, with the Makefile's defaults (GO=go).
func makeDryRun(t testing.TB, target string) string {
	t.Helper()
	cmd := exec.Command("make", "-n", "-s", "--no-print-directory", "GO=go", target)
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=") // not the flags of a make that runs this test
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", target, err, out)
	}
	return strings.TrimSpace(string(out))
}

// buildStage returns the Dockerfile's go build command.
func buildStage(t testing.TB, d *Dockerfile) GoBuild {
	t.Helper()
	st := d.Stage("build")
	if st == nil {
		t.Fatal("the Dockerfile has no stage named build")
	}
	for _, run := range st.All("RUN") {
		if b, err := ParseGoBuild(run.Value); err == nil {
			return b
		}
	}
	t.Fatal("the build stage runs no go build")
	return GoBuild{}
}

// The image's binary is compiled as `make build` compiles it: same package, same flags and
// build environment (static, CGO_ENABLED=0), with a Go at least as new as go.mod asks for;
// and both runtime stages copy exactly that output.
func TestDockerfileBuildsWhatMakeBuilds(t *testing.T) {
	d := dockerfile(t)
	docker := buildStage(t, d)
	local, err := ParseGoBuild(makeDryRun(t, "build"))
	if err != nil {
		t.Fatal(err)
	}
	if docker.Env["CGO_ENABLED"] != "0" {
		t.Errorf("the Dockerfile's go build must set CGO_ENABLED=0 (a static binary for distroless/static): %+v", docker)
	}
	if fmt.Sprint(docker.Env) != fmt.Sprint(local.Env) || !slices.Equal(docker.Flags, local.Flags) || !slices.Equal(docker.Packages, local.Packages) {
		t.Errorf("the Dockerfile builds\n  %+v\nbut make build builds\n  %+v", docker, local)
	}
	if !slices.Equal(docker.Packages, []string{"./cmd/projectmcp"}) || docker.Output == "" {
		t.Errorf("the Dockerfile must build ./cmd/projectmcp into a named output: %+v", docker)
	}

	data, err := os.ReadFile(filepath.Join(root(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	goVersion := d.Args["GO_VERSION"]
	if !strings.HasPrefix(d.Stage("build").Base, "golang:"+goVersion) || !versionAtLeast(goVersion, string(m[1])) {
		t.Errorf("build stage FROM %s (GO_VERSION %q): go.mod needs go %s", d.Stage("build").Base, goVersion, m[1])
	}

	for _, stage := range []string{"static", "node"} {
		img, err := d.Image(stage)
		if err != nil {
			t.Fatal(err)
		}
		if img.BinaryFrom != "build:"+docker.Output {
			t.Errorf("stage %s copies %q, the build stage writes %s", stage, img.BinaryFrom, docker.Output)
		}
	}
}

// versionAtLeast compares dotted versions numerically ("1.26" ≥ "1.26.0").
func versionAtLeast(have, want string) bool {
	h, w := strings.Split(have, "."), strings.Split(want, ".")
	for i := range w {
		var hv, wv int
		if i < len(h) {
			_, _ = fmt.Sscan(h[i], &hv)
		}
		_, _ = fmt.Sscan(w[i], &wv)
		if hv != wv {
			return hv > wv
		}
		if i >= len(h) {
			return true // "1.26" is any 1.26.x, the newest of which the image gets
		}
	}
	return true
}

// Both images run the same way, which is what the manifests and the chart assume whichever
// they name: numeric non-root user, HOME, the binary as entrypoint, `controller` by default.
// A plain `docker build .` makes the HTTP-only image, on a minimal base.
func TestImagesAgree(t *testing.T) {
	d := dockerfile(t)
	static, err := d.Image("static")
	if err != nil {
		t.Fatal(err)
	}
	node, err := d.Image("node")
	if err != nil {
		t.Fatal(err)
	}
	if static.UID == 0 || static.GID == 0 || static.Home == "" || !slices.Equal(static.Cmd, []string{"controller"}) {
		t.Errorf("static image %+v: want a non-root user, HOME and CMD [controller]", static)
	}
	node.Stage = static.Stage
	if fmt.Sprint(node) != fmt.Sprint(static) {
		t.Errorf("the images differ:\n  static %+v\n  node   %+v", static, node)
	}
	if last := d.Stages[len(d.Stages)-1]; last.Name != "static" || !strings.HasPrefix(last.Base, "gcr.io/distroless/static") {
		t.Errorf("the default (last) stage is %s FROM %s, want static FROM distroless/static", last.Name, last.Base)
	}
	if !strings.HasPrefix(d.Stage("node").Base, "node:") {
		t.Errorf("the node stage is FROM %s", d.Stage("node").Base)
	}
	for _, target := range []struct{ make, stage, suffix string }{{"docker-build", "static", ""}, {"docker-build-node", "node", "-node"}} {
		cmd := makeDryRun(t, target.make)
		want := fmt.Sprintf("--target %s -t %s .", target.stage, imageRef(t)+target.suffix)
		if !strings.HasSuffix(cmd, want) {
			t.Errorf("make %s runs %q, want it to end in %q", target.make, cmd, want)
		}
	}
}

// imageRef is IMAGE:VERSION from the Makefile, the tag make docker-build gives the image.
func imageRef(t testing.TB) string {
	t.Helper()
	out := makeDryRun(t, "docker-build")
	fields := strings.Fields(out)
	i := slices.Index(fields, "-t")
	if i < 0 || i+1 == len(fields) {
		t.Fatalf("make docker-build: no -t in %q", out)
	}
	return fields[i+1]
}

// config/manager runs the image as built (user, entrypoint, HOME, ports, probes, the gateway
// Service the URL names), names the tag make docker-build makes, and the chart's appVersion is
// the same version.
func TestManifestsRunTheImage(t *testing.T) {
	d := dockerfile(t)
	data, err := os.ReadFile(filepath.Join(root(t), "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, stage := range []string{"static", "node"} {
		img, err := d.Image(stage)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range CheckInstall(objs, img) {
			t.Errorf("config/manager with the %s image: %s", stage, p)
		}
	}
	_, c, err := Controller(objs)
	if err != nil {
		t.Fatal(err)
	}
	ref := imageRef(t)
	if c.Image != ref {
		t.Errorf("config/manager runs image %s, make docker-build tags %s", c.Image, ref)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	data, err = os.ReadFile(filepath.Join(root(t), "charts", "projectmcp", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if _, version, _ := strings.Cut(ref, ":"); chart.AppVersion != version {
		t.Errorf("the chart's appVersion %q is not the image's version %q", chart.AppVersion, version)
	}
	if Find(objs, "Service", "projectmcp-metrics") == nil {
		t.Error("config/manager has no metrics Service")
	}
}

// The chart's CRD and ClusterRole are the generated ones (make chart-crds copies them; make
// verify fails on a stale copy).
func TestChartCopiesAreGenerated(t *testing.T) {
	r := root(t)
	for copy, generated := range map[string]string{
		"charts/projectmcp/crds/mcp.dsh.dev_projectmcps.yaml": "config/crd/bases/mcp.dsh.dev_projectmcps.yaml",
		"charts/projectmcp/files/controller-role.yaml":        "config/rbac/role.yaml",
	} {
		a, err1 := os.ReadFile(filepath.Join(r, copy))
		b, err2 := os.ReadFile(filepath.Join(r, generated))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run make chart-crds", copy, generated)
		}
	}
	crds, _ := filepath.Glob(filepath.Join(r, "charts/projectmcp/crds/*"))
	bases, _ := filepath.Glob(filepath.Join(r, "config/crd/bases/*"))
	if len(crds) != len(bases) {
		t.Errorf("the chart has %d CRDs, config/crd/bases %d: run make chart-crds", len(crds), len(bases))
	}
}

// The build context keeps everything the build reads: every Go file and embedded file of the
// main module's packages that ./cmd/projectmcp imports, and go.mod/go.sum.
func TestDockerIgnoreKeepsTheBuildInputs(t *testing.T) {
	r := root(t)
	data, err := os.ReadFile(filepath.Join(r, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns := strings.Split(string(data), "\n")
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
		"./cmd/projectmcp")
	cmd.Dir = r
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // the files of the image's build
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := append(strings.Fields(string(out)), filepath.Join(r, "go.mod"), filepath.Join(r, "go.sum"))
	if len(files) < 20 {
		t.Fatalf("go list found only %d files", len(files))
	}
	for _, f := range files {
		rel, err := filepath.Rel(r, f)
		if err != nil {
			t.Fatal(err)
		}
		if DockerIgnored(patterns, filepath.ToSlash(rel)) {
			t.Errorf(".dockerignore leaves out %s, which the build needs", rel)
		}
	}
}
