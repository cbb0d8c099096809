package conn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"
	"unicode"

	"golang.org/x/net/http/httpguts"

	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/policy"
	"github.com/dsh-dev/projectmcp/internal/spawn"
)

const (
	// helperTimeout bounds one run of a server's headersHelper: a connect waits for it.
	helperTimeout = 10 * time.Second
	// helperOutputBytes bounds what a headersHelper may print: a JSON object of headers.
	helperOutputBytes = 64 << 10
	// helperStderrBytes is how much of the end of a headersHelper's stderr is kept, for its
	// last line.
	helperStderrBytes = 4 << 10
	// helperLineBytes bounds the stderr line a failing headersHelper is named by in status.
	helperLineBytes = 512
	// helperGrace is how long a headersHelper's group and pipes are given to end once it has
	// exited or run out of time.
	helperGrace = time.Second
)

// helperHeaders runs the server's headersHelper, as Claude Code does at connect, and returns
// the headers it printed. It runs under the rules of a stdio server's command: its first word
// must match an --allow-command pattern when the controller has any, its environment is
// the isolation's (with Claude Code's two variables naming the server: its name, and its URL
// as written), and it runs as the servers' user in a HOME of its own. The line is split into
// words as a shell would split it, without running a shell (a helper that needs one says
// `sh -c '...'`, and sh must then be allowed). It takes no ${VAR} reference: a command line is
// readable by every user of the machine, and a Secret's consent names where its values may go,
// never a helper. The values it prints are secrets: they join the connection's scrubber and
// appear in no error.
func (l launcher) helperHeaders(ctx context.Context, line, url string) (http.Header, error) {
	words, err := splitWords(line)
	if err != nil {
		return nil, &invalidConfigError{msg: "headersHelper: " + err.Error()}
	}
	if names, _ := config.References(line); len(names) > 0 {
		return nil, &invalidConfigError{msg: fmt.Sprintf("headersHelper: it refers to ${%s}, and a helper's command line takes no ${VAR} reference (every user of the machine can read a command line); have the helper read its credential itself", names[0])}
	}
	if allow := l.opts.AllowCommands; allow != nil && !policy.CommandAllowed(allow, words[0]) {
		return nil, &invalidConfigError{msg: fmt.Sprintf("headersHelper: command %q is not allowed here: it matches no --allow-command pattern of the controller", words[0])}
	}
	out, err := l.runHelper(ctx, words, url)
	if err != nil {
		return nil, err
	}
	return parseHelperOutput(out, l.secrets)
}

// runHelper runs a headersHelper's words and returns its stdout; a helper that fails, prints
// too much or outlives helperTimeout is an error naming its stderr's last line.
func (l launcher) runHelper(ctx context.Context, words []string, url string) ([]byte, error) {
	iso := &l.opts.Isolation
	home, removeHome, err := iso.MakeHome(l.opts.Server.Name)
	if err != nil {
		return nil, err
	}
	defer removeHome()
	cmd := exec.Command(words[0], words[1:]...)
	cmd.Env = iso.Env(home, []string{
		"CLAUDE_CODE_MCP_SERVER_NAME=" + l.opts.Server.Name,
		"CLAUDE_CODE_MCP_SERVER_URL=" + url,
	})
	// No Dir: the helper starts where a stdio server without cwd does (the controller's working
	// directory; under dev, where dev was started, as Claude Code runs it from where it was).
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	child, err := spawn.Start(cmd, iso.Credential)
	closeAll(outW, errW) // the child holds its ends now (or never will)
	if err != nil {
		closeAll(outR, errR)
		return nil, fmt.Errorf("headersHelper: starting %q: %w", words[0], err)
	}
	stdout, stderr := make(chan []byte, 1), make(chan []byte, 1)
	go func() { data, _ := io.ReadAll(io.LimitReader(outR, helperOutputBytes+1)); stdout <- data }()
	go func() { stderr <- tail(errR, helperStderrBytes) }()
	timer := time.NewTimer(helperTimeout)
	defer timer.Stop()
	var why error
	select {
	case <-child.Done():
		if child.Err() != nil {
			why = child.Err()
		}
	case <-timer.C:
		why = fmt.Errorf("it did not finish within %s", helperTimeout)
	case <-ctx.Done():
		why = context.Cause(ctx)
	}
	child.Stop(helperGrace)
	out, last := drain(stdout, stderr, outR, errR)
	switch {
	case why != nil:
		return nil, helperFailed(l.secrets, last, why)
	case len(out) > helperOutputBytes:
		return nil, fmt.Errorf("headersHelper: its output is over %d bytes", helperOutputBytes)
	}
	return out, nil
}

// drain waits for a helper's output readers, and closes the pipes under them if something
// left in the group's place (a setsid grandchild) keeps them open past helperGrace.
func drain(stdout, stderr <-chan []byte, pipes ...*os.File) (out, errTail []byte) {
	timer := time.NewTimer(helperGrace)
	defer timer.Stop()
	for got := 0; got < 2; got++ {
		select {
		case out = <-stdout:
		case errTail = <-stderr:
		case <-timer.C:
			closeAll(pipes...)
			got-- // the reader still owes its result, now at once
			timer.Reset(time.Hour)
		}
	}
	closeAll(pipes...)
	return out, errTail
}

// tail reads r to its end and returns at most the last n bytes of it.
func tail(r io.Reader, n int) []byte {
	var kept []byte
	buf := make([]byte, 4096)
	for {
		m, err := r.Read(buf)
		kept = append(kept, buf[:m]...)
		if len(kept) > n {
			kept = kept[len(kept)-n:]
		}
		if err != nil {
			return kept
		}
	}
}

// helperFailed is the error of a failing headersHelper: its stderr's last line when it wrote
// one (scrubbed, stripped of control characters, bounded), else how it ended.
func helperFailed(secrets *scrubber, stderr []byte, why error) error {
	if line := lastLine(stderr); line != "" {
		return fmt.Errorf("headersHelper: %s", secrets.redact(line))
	}
	return fmt.Errorf("headersHelper: %s", secrets.redact(why.Error()))
}

// lastLine is the last non-blank line of text, without control characters and at most
// helperLineBytes long.
func lastLine(text []byte) string {
	lines := strings.Split(strings.TrimRight(string(bytes.ToValidUTF8(text, []byte("?"))), " \t\r\n"), "\n")
	line := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, lines[len(lines)-1])
	line = strings.TrimSpace(line)
	if len(line) > helperLineBytes {
		line = strings.ToValidUTF8(line[:helperLineBytes], "") + "..."
	}
	return line
}

// parseHelperOutput reads a headersHelper's output: a JSON object whose values are strings,
// each a valid header. Its values join the scrubber; no error repeats them.
func parseHelperOutput(out []byte, secrets *scrubber) (http.Header, error) {
	var fields map[string]string
	if err := json.Unmarshal(out, &fields); err != nil || fields == nil {
		return nil, errors.New("headersHelper: its output is not a JSON object of string values")
	}
	values := make([]string, 0, len(fields))
	for _, v := range fields {
		values = append(values, v)
	}
	secrets.add(values)
	h := http.Header{}
	for name, v := range fields {
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("headersHelper: %q is not a valid header name", secrets.redact(name))
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("headersHelper: the value of header %q is not a valid header value", name)
		}
		h.Set(name, v)
	}
	return h, nil
}

// mergeHeaders sets over base the headers a helper gave: as in Claude Code, the helper's
// value of a header wins over the configured one.
func mergeHeaders(base, helper http.Header) {
	for name, v := range helper {
		base[name] = v
	}
}

// splitWords splits a command line into words as a POSIX shell splits a simple command:
// blanks separate words, single quotes keep everything literally, double quotes keep all but
// a backslash before $, `, ", \ or a newline, and a backslash outside quotes keeps the next
// character. What only a shell would do (pipes, redirections, substitutions, globs, $VAR
// without braces) is refused rather than passed on as words; a ${VAR} is left as written
// (helperHeaders refuses it).
func splitWords(line string) ([]string, error) {
	var words []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words, inWord = append(words, word.String()), false
				word.Reset()
			}
			continue
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("an unterminated single quote")
			}
			word.WriteString(line[i+1 : i+1+end])
			i += end + 1
		case c == '"':
			n, err := doubleQuoted(line[i+1:], &word)
			if err != nil {
				return nil, err
			}
			i += n + 1
		case c == '\\':
			if i+1 == len(line) {
				return nil, errors.New("a backslash at the end")
			}
			i++
			word.WriteByte(line[i])
		case strings.IndexByte("|&;<>()`*?[", c) >= 0 || (c == '$' && !strings.HasPrefix(line[i:], "${")):
			return nil, fmt.Errorf("%q needs a shell, which the controller does not run the helper with: write sh -c '...'", string(c))
		default:
			word.WriteByte(c)
		}
		inWord = true
	}
	if inWord {
		words = append(words, word.String())
	}
	if len(words) == 0 {
		return nil, errors.New("it names no command")
	}
	return words, nil
}

// doubleQuoted reads a double-quoted string's inside (s starts after the opening quote) into
// w and returns how many bytes it took, through the closing quote.
func doubleQuoted(s string, w *strings.Builder) (int, error) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, nil
		case c == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0:
			i++
			w.WriteByte(s[i])
		case c == '`' || (c == '$' && !strings.HasPrefix(s[i:], "${")):
			return 0, fmt.Errorf("%q needs a shell, which the controller does not run the helper with: write sh -c '...'", string(c))
		default:
			w.WriteByte(c)
		}
	}
	return 0, errors.New("an unterminated double quote")
}
