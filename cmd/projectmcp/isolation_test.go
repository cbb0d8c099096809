package main

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
)

// parseControllerFlags parses args as `projectmcp controller` would.
func parseControllerFlags(t *testing.T, args ...string) *controllerFlags {
	t.Helper()
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	var f controllerFlags
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
