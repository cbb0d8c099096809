package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/dsh-dev/projectmcp/internal/sandbox"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// parseControllerFlags parses args as `projectmcp controller` would.
func parseControllerFlags(t *testing.T, args ...string) *controllerFlags {
	t.Helper()
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	f := defaultControllerFlags()
	f.bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &f
}

// --server-env, --server-uid and --server-gid reach the connections' isolation; bad values
// are refused with an error naming the flag.
func TestServerIsolationFlags(t *testing.T) {
	f := parseControllerFlags(t, "--server-env", "npm_config_cache", "--server-env", "HTTPS_PROXY")
	d, err := f.connDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Isolation.PassEnv, []string{"npm_config_cache", "HTTPS_PROXY"}) || d.Isolation.Home != "" || d.Isolation.Credential != nil {
		t.Fatalf("isolation = %+v", d.Isolation)
	}
	if os.Geteuid() == 0 {
		d, err := parseControllerFlags(t, "--server-uid", "65534").connDefaults()
		if err != nil || d.Isolation.Credential == nil || d.Isolation.Credential.Uid != 65534 || d.Isolation.Credential.Gid != 65534 {
			t.Fatalf("--server-uid 65534: %+v %v", d.Isolation.Credential, err)
		}
		d, err = parseControllerFlags(t, "--server-uid", "1000", "--server-gid", "2000").connDefaults()
		if err != nil || d.Isolation.Credential.Uid != 1000 || d.Isolation.Credential.Gid != 2000 {
			t.Fatalf("--server-uid 1000 --server-gid 2000: %+v %v", d.Isolation.Credential, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server-env", "A=B"}, `--server-env "A=B"`},
		{[]string{"--server-env", ""}, `--server-env ""`},
		{[]string{"--server-env", "HOME"}, `--server-env "HOME"`},
		{[]string{"--server-uid", "nobody"}, `--server-uid "nobody"`},
		{[]string{"--server-uid", "-1"}, `--server-uid "-1"`},
		{[]string{"--server-uid", "1", "--server-gid", "x"}, `--server-gid "x"`},
		{[]string{"--server-gid", "1"}, "--server-gid needs --server-uid"},
	} {
		_, err := parseControllerFlags(t, tc.args...).connDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

// The controller refuses loopback and link-local HTTP servers unless --allow-url names them;
// --allow-url and --deny-url reach the connections, and a bad pattern is refused naming the
// flag.
func TestEgressFlags(t *testing.T) {
	d, err := parseControllerFlags(t).connDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if e := d.Isolation.Egress; e == nil || e.Loopback || len(e.Allow) != 0 || len(e.Deny) != 0 {
		t.Fatalf("default egress = %+v, want a policy refusing loopback", e)
	}
	d, err = parseControllerFlags(t, "--allow-url", "https://*.example.com", "--allow-url", "10.0.0.0/8", "--deny-url", "10.96.0.1").connDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if e := d.Isolation.Egress; len(e.Allow) != 2 || e.Allow[1].String() != "10.0.0.0/8" || len(e.Deny) != 1 || e.Deny[0].String() != "10.96.0.1" {
		t.Fatalf("egress = %+v", e)
	}
	for _, tc := range [][]string{{"--allow-url", "example.com"}, {"--deny-url", "ftp://x"}} {
		_, err := parseControllerFlags(t, tc...).connDefaults()
		if err == nil || !strings.HasPrefix(err.Error(), tc[0]+": ") || !strings.Contains(err.Error(), tc[1]) {
			t.Errorf("%q: error %v, want one naming the flag and the value", tc, err)
		}
	}
}

// --server-uid needs the capabilities to switch users, not root as such: a controller whose
// bounding set lacks CAP_KILL is refused with an error naming CAP_KILL, and one with the four
// capabilities the chart grants gets past the check. Run as root, through setpriv (which
// narrows the capabilities a root process keeps across exec).
func TestServerUIDNeedsCapabilities(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and setpriv to run the controller with fewer capabilities")
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caps, want, notWant string
	}{
		{"+setuid,+setgid,+chown", "it lacks CAP_KILL", ""},
		{"+setuid,+kill", "it lacks CAP_SETGID, CAP_CHOWN", ""},
		{"+setuid,+setgid,+kill,+chown", "", "--server-uid"},
	} {
		cmd := exec.Command(setpriv, "--bounding-set", "-all,"+tc.caps, "--", os.Args[0], "controller",
			"--kubeconfig", kubeconfig, "--leader-elect=false", "--gateway-bind-address", "0",
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--server-uid", "65532")
		cmd.Env = append(os.Environ(), mainEnvVar+"=1")
		out, _ := startAndStopSoon(cmd)
		if tc.want != "" && !strings.Contains(out, tc.want) {
			t.Errorf("bounding set %s: output %q, want %q", tc.caps, out, tc.want)
		}
		if tc.notWant != "" && strings.Contains(out, tc.notWant) {
			t.Errorf("bounding set %s: refused: %q", tc.caps, out)
		}
	}
}

// startAndStopSoon runs cmd for at most two seconds (a controller that got past its checks
// runs on) and returns its output.
func startAndStopSoon(cmd *exec.Cmd) (string, error) {
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(2 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), nil
	}
}

// --sandbox and --server-uid-range reach the connections' isolation: the sandbox names every
// layer (in force or why not), hides the controller's kubeconfig, token and dev's data, and a
// range is refused without --sandbox or when malformed, naming the flag.
func TestSandboxFlags(t *testing.T) {
	t.Setenv("KUBECONFIG", "/etc/projectmcp/one:/etc/projectmcp/two")
	f := parseControllerFlags(t, "--sandbox", "--server-uid-range", "100000-165535")
	f.hide = append(f.hide, "/srv/dev-data")
	d, err := f.connDefaults()
	if err != nil {
		t.Fatal(err)
	}
	sb := d.Isolation.Sandbox
	if sb == nil || len(sb.Layers) != len(sandbox.Layers) {
		t.Fatalf("--sandbox: %+v, want every layer named", sb)
	}
	for _, p := range []string{"/var/run/secrets", "/etc/projectmcp/one", "/etc/projectmcp/two", "/srv/dev-data"} {
		if !slices.Contains(sb.Hide, p) {
			t.Errorf("the sandbox shows %s to servers (hides %v)", p, sb.Hide)
		}
	}
	if want := (sandbox.Limits{Memory: 1 << 30, Pids: 1024}); sb.Limits != want {
		t.Errorf("default limits %+v, want %+v", sb.Limits, want)
	}
	if sandbox.InForce(sb.Layers, sandbox.LayerUID) != (sb.UIDs != nil) {
		t.Errorf("uid layer in force %v, uids %v", sandbox.InForce(sb.Layers, sandbox.LayerUID), sb.UIDs)
	}
	if d, err := parseControllerFlags(t).connDefaults(); err != nil || d.Isolation.Sandbox != nil {
		t.Fatalf("without --sandbox: %+v %v, want none", d.Isolation.Sandbox, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server-uid-range", "100000-165535"}, "--server-uid-range needs --sandbox"},
		{[]string{"--sandbox", "--server-uid-range", "0-10"}, `--server-uid-range "0-10"`},
		{[]string{"--sandbox", "--server-uid-range", "x"}, `--server-uid-range "x"`},
		{[]string{"--sandbox", "--server-memory-limit", "lots"}, `--server-memory-limit "lots"`},
		{[]string{"--sandbox", "--server-cpu-limit", "-1"}, `--server-cpu-limit "-1"`},
		{[]string{"--sandbox", "--server-pids-limit", "-1"}, "--server-pids-limit must not be negative"},
	} {
		_, err := parseControllerFlags(t, tc.args...).connDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
