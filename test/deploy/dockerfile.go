// Package deploy reads what puts projectmcp into a cluster — the Dockerfile, the Makefile's
// build command, config/manager and the chart's rendered manifests — so that its tests can
// check that they agree with each other and with the binary. No Docker engine runs where the
// tests run, so the image is checked through its Dockerfile: the build stage compiles what
// `make build` compiles, and the runtime stages' user, entrypoint, HOME and ports are the ones
// the manifests assume.
package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Dockerfile is a parsed Dockerfile: the ARGs declared before the first FROM, and the stages.
type Dockerfile struct {
	Args   map[string]string
	Stages []*Stage
}

// Stage is one FROM and the instructions under it.
type Stage struct {
	Name         string // the AS name; "" when there is none
	Base         string // the FROM image with the global ARGs' defaults substituted
	Instructions []Instruction
}

// Instruction is one instruction, continuation lines joined.
type Instruction struct {
	Line    int    // where it starts, 1-based
	Keyword string // upper case: RUN, COPY, USER, ...
	Value   string // the rest of the instruction
}

// ParseDockerfileFile parses the Dockerfile at path.
func ParseDockerfileFile(path string) (*Dockerfile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := ParseDockerfile(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// ParseDockerfile reads the instructions of a Dockerfile. It understands what this
// repository's Dockerfile uses: comments, backslash continuations, ARG defaults in FROM,
// and FROM ... AS name. Heredocs and a changed escape character are refused, not misread.
func ParseDockerfile(r io.Reader) (*Dockerfile, error) {
	d := &Dockerfile{Args: map[string]string{}}
	sc := bufio.NewScanner(r)
	var cur strings.Builder
	start, n := 0, 0
	flush := func() error {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return nil
		}
		keyword, value, _ := strings.Cut(text, " ")
		in := Instruction{Line: start, Keyword: strings.ToUpper(keyword), Value: strings.TrimSpace(value)}
		if strings.Contains(in.Value, "<<") {
			return fmt.Errorf("line %d: heredocs are not supported by this parser", in.Line)
		}
		switch {
		case in.Keyword == "FROM":
			fields := strings.Fields(in.Value)
			st := &Stage{}
			switch {
			case len(fields) == 1:
			case len(fields) == 3 && strings.EqualFold(fields[1], "AS"):
				st.Name = fields[2]
			default:
				return fmt.Errorf("line %d: FROM %q: want IMAGE [AS NAME]", in.Line, in.Value)
			}
			st.Base = d.expand(fields[0])
			d.Stages = append(d.Stages, st)
		case len(d.Stages) == 0:
			if in.Keyword != "ARG" {
				return fmt.Errorf("line %d: %s before the first FROM", in.Line, in.Keyword)
			}
			name, def, _ := strings.Cut(in.Value, "=")
			d.Args[name] = def
		default:
			st := d.Stages[len(d.Stages)-1]
			st.Instructions = append(st.Instructions, in)
		}
		return nil
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			if start == 0 && strings.HasPrefix(strings.ToLower(strings.ReplaceAll(trimmed, " ", "")), "#escape=") {
				return nil, fmt.Errorf("line %d: a changed escape character is not supported", n)
			}
			continue // comments (and parser directives), also between continuation lines
		}
		if cur.Len() == 0 {
			if trimmed == "" {
				continue
			}
			start = n
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSpace(strings.TrimSuffix(trimmed, `\`)) + " ")
			continue
		}
		cur.WriteString(trimmed)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: the file ends inside a continued instruction", start)
	}
	if len(d.Stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return d, nil
}

// expand substitutes ${NAME} and $NAME of the global ARGs.
func (d *Dockerfile) expand(s string) string {
	return os.Expand(s, func(name string) string { return d.Args[name] })
}

// Stage returns the stage named name, or nil.
func (d *Dockerfile) Stage(name string) *Stage {
	for _, s := range d.Stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// All returns the stage's instructions with the keyword, in order.
func (s *Stage) All(keyword string) []Instruction {
	var out []Instruction
	for _, in := range s.Instructions {
		if in.Keyword == keyword {
			out = append(out, in)
		}
	}
	return out
}

// Last returns the stage's last instruction with the keyword: the one in force for USER,
// ENTRYPOINT, CMD and WORKDIR.
func (s *Stage) Last(keyword string) (Instruction, bool) {
	all := s.All(keyword)
	if len(all) == 0 {
		return Instruction{}, false
	}
	return all[len(all)-1], true
}

// Env is the stage's environment from its ENV instructions (KEY=VALUE form, unquoted).
func (s *Stage) Env() (map[string]string, error) {
	env := map[string]string{}
	for _, in := range s.All("ENV") {
		for _, pair := range strings.Fields(in.Value) {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || strings.ContainsAny(v, `"'`) {
				return nil, fmt.Errorf("line %d: ENV %q: want unquoted KEY=VALUE pairs", in.Line, in.Value)
			}
			env[k] = v
		}
	}
	return env, nil
}

// ExecForm decodes an instruction written in exec form (a JSON array), as ENTRYPOINT and CMD
// must be for the manifests' args to reach the binary without a shell.
func (in Instruction) ExecForm() ([]string, error) {
	var out []string
	if err := json.Unmarshal([]byte(in.Value), &out); err != nil {
		return nil, fmt.Errorf("line %d: %s %s is not in exec form (a JSON array of strings): %v", in.Line, in.Keyword, in.Value, err)
	}
	return out, nil
}

// Copy is a COPY instruction's parts.
type Copy struct {
	From    string // --from stage; "" for the build context
	Sources []string
	Dest    string
}

// Copies returns the stage's COPY instructions.
func (s *Stage) Copies() ([]Copy, error) {
	var out []Copy
	for _, in := range s.All("COPY") {
		var c Copy
		var rest []string
		for _, f := range strings.Fields(in.Value) {
			if v, ok := strings.CutPrefix(f, "--from="); ok {
				c.From = v
				continue
			}
			if strings.HasPrefix(f, "--") {
				continue // --chown, --chmod, --link: not what the tests compare
			}
			rest = append(rest, f)
		}
		if len(rest) < 2 {
			return nil, fmt.Errorf("line %d: COPY %q: want SOURCE... DEST", in.Line, in.Value)
		}
		c.Sources, c.Dest = rest[:len(rest)-1], rest[len(rest)-1]
		out = append(out, c)
	}
	return out, nil
}

// GoBuild is one `go build` command line: environment assignments before it, its flags, the
// -o output and the packages.
type GoBuild struct {
	Env      map[string]string
	Flags    []string
	Output   string
	Packages []string
}

// ParseGoBuild finds the `go build` in a shell command (a RUN line or make's dry-run output)
// and splits it. Commands joined with && are searched in turn; quoting is refused rather than
// guessed at.
func ParseGoBuild(command string) (GoBuild, error) {
	for _, part := range strings.Split(command, "&&") {
		fields := strings.Fields(part)
		b := GoBuild{Env: map[string]string{}}
		i := 0
		for ; i < len(fields) && strings.Contains(fields[i], "=") && !strings.HasPrefix(fields[i], "-"); i++ {
			k, v, _ := strings.Cut(fields[i], "=")
			b.Env[k] = v
		}
		if i+1 >= len(fields) || (fields[i] != "go" && !strings.HasSuffix(fields[i], "/go")) || fields[i+1] != "build" {
			continue
		}
		for j := i + 2; j < len(fields); j++ {
			f := fields[j]
			switch {
			case strings.ContainsAny(f, `"'`):
				return GoBuild{}, fmt.Errorf("%q: quoted arguments are not supported", command)
			case f == "-o":
				if j+1 == len(fields) {
					return GoBuild{}, fmt.Errorf("%q: -o without a value", command)
				}
				j++
				b.Output = fields[j]
			case strings.HasPrefix(f, "-o="):
				b.Output = strings.TrimPrefix(f, "-o=")
			case strings.HasPrefix(f, "-"):
				b.Flags = append(b.Flags, f)
			default:
				b.Packages = append(b.Packages, f)
			}
		}
		return b, nil
	}
	return GoBuild{}, fmt.Errorf("%q has no go build", command)
}

// Args is the command line of this build with another output: what to run to compile the
// same binary elsewhere.
func (b GoBuild) Args(output string) []string {
	args := append([]string{"build"}, b.Flags...)
	args = append(args, "-o", output)
	return append(args, b.Packages...)
}

// DockerIgnored reports whether a path of the build context (slash-separated, relative) is
// left out by a .dockerignore's patterns. Supported: plain paths and globs (a pattern
// excludes what it matches and everything under it), a leading **/ (at any depth), and !
// exceptions, the last matching pattern winning.
func DockerIgnored(patterns []string, name string) bool {
	ignored := false
	segs := strings.Split(name, "/")
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		negate := strings.HasPrefix(p, "!")
		p = strings.Trim(strings.TrimPrefix(p, "!"), "/")
		anyDepth := strings.HasPrefix(p, "**/")
		psegs := strings.Split(strings.TrimPrefix(p, "**/"), "/")
		if matchSegments(psegs, segs, anyDepth) {
			ignored = !negate
		}
	}
	return ignored
}

// matchSegments matches a pattern's segments against a prefix of the path's (so that a
// directory's pattern covers what is in it), at the start or, with anyDepth, anywhere.
func matchSegments(pattern, segs []string, anyDepth bool) bool {
	for off := 0; off+len(pattern) <= len(segs); off++ {
		ok := true
		for i, ps := range pattern {
			if m, err := path.Match(ps, segs[off+i]); err != nil || !m {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
		if !anyDepth {
			return false
		}
	}
	return false
}
