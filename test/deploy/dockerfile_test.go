package deploy

import (
	"slices"
	"strings"
	"testing"
)

func TestParseDockerfile(t *testing.T) {
	d, err := ParseDockerfile(strings.NewReader(`# syntax=docker/dockerfile:1
ARG GO=1.26
FROM golang:${GO} AS build
# a comment
RUN a \
  # inside a continuation
  && b
FROM scratch
ENV HOME=/h X=1
USER 1:2
ENTRYPOINT ["/bin/x"]
CMD ["run"]
COPY --from=build --chown=1:2 /out/x /bin/x
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Stages) != 2 || d.Stages[0].Name != "build" || d.Stages[0].Base != "golang:1.26" || d.Stages[1].Base != "scratch" {
		t.Fatalf("stages %+v", d.Stages)
	}
	run, _ := d.Stage("build").Last("RUN")
	if run.Value != "a && b" || run.Line != 5 {
		t.Fatalf("RUN %+v", run)
	}
	img, err := d.Image("")
	if err != nil {
		t.Fatal(err)
	}
	if img.UID != 1 || img.GID != 2 || !slices.Equal(img.Entrypoint, []string{"/bin/x"}) || !slices.Equal(img.Cmd, []string{"run"}) ||
		img.Home != "/h" || img.Binary != "/bin/x" || img.BinaryFrom != "build:/out/x" {
		t.Fatalf("image %+v", img)
	}
}

func TestParseDockerfileErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"RUN x", "line 1: RUN before the first FROM"},
		{"FROM a\nRUN x \\", "line 2: the file ends inside a continued instruction"},
		{"FROM a b c d", "line 1: FROM"},
		{"# escape=`\nFROM a", "line 1: a changed escape character"},
		{"FROM a\nRUN <<EOF\nx\nEOF", "line 2: heredocs"},
		{"", "no FROM"},
	} {
		_, err := ParseDockerfile(strings.NewReader(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.want)
		}
	}
	for _, tc := range []struct{ text, want string }{
		{"FROM a\nUSER nonroot\nENTRYPOINT [\"/x\"]", `USER "nonroot": want numeric UID:GID`},
		{"FROM a\nENTRYPOINT [\"/x\"]", "has no USER"},
		{"FROM a\nUSER 1:1\nENTRYPOINT /x", "not in exec form"},
		{"FROM a\nUSER 1:1\nENTRYPOINT [\"/x\"]\nENV A=\"b c\"", "unquoted KEY=VALUE"},
	} {
		d, err := ParseDockerfile(strings.NewReader(tc.text))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Image(""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.want)
		}
	}
}

func TestParseGoBuild(t *testing.T) {
	b, err := ParseGoBuild("go mod download && CGO_ENABLED=0 GOOS=linux go build -trimpath -o /out/x ./cmd/x")
	if err != nil {
		t.Fatal(err)
	}
	if b.Env["CGO_ENABLED"] != "0" || b.Env["GOOS"] != "linux" || !slices.Equal(b.Flags, []string{"-trimpath"}) ||
		b.Output != "/out/x" || !slices.Equal(b.Packages, []string{"./cmd/x"}) {
		t.Fatalf("%+v", b)
	}
	if got := b.Args("y"); !slices.Equal(got, []string{"build", "-trimpath", "-o", "y", "./cmd/x"}) {
		t.Fatalf("args %q", got)
	}
	for _, bad := range []string{"go vet ./...", `go build -ldflags "-s -w" ./x`, "go build -o"} {
		if _, err := ParseGoBuild(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestDockerIgnored(t *testing.T) {
	patterns := []string{"# comment", ".git", "bin/", "**/*.test", "docs", "docs/keep.md", "!docs/keep.md", "/charts"}
	for path, want := range map[string]bool{
		".git/HEAD":        true,
		"bin/projectmcp":   true,
		"cmd/x/x.test":     true,
		"x.test":           true,
		"docs/a.md":        true,
		"docs/keep.md":     false, // the exception comes last
		"charts/c/Chart":   true,
		"cmd/projectmcp/m": false,
		"binary/x":         false, // a pattern matches whole segments
		"config/docs/x":    false, // and, without **/, from the root
	} {
		if got := DockerIgnored(patterns, path); got != want {
			t.Errorf("%s: ignored %v, want %v", path, got, want)
		}
	}
}

func TestFlagValue(t *testing.T) {
	args := []string{"controller", "--a=1", "--b", "2", "--c", "--a=3"}
	for name, want := range map[string]string{"a": "3", "b": "2"} {
		if v, ok := FlagValue(args, name); !ok || v != want {
			t.Errorf("--%s: %q %v", name, v, ok)
		}
	}
	if _, ok := FlagValue(args, "c"); ok {
		t.Error("--c has no value")
	}
}
