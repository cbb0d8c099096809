package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// The endpoints connect and adopt write come from a ProjectMCP's status, and whoever may write
// projectmcps/status could name a host of theirs there and collect every agent's token. So the
// gateway's origin (scheme and host) is pinned per cluster: --gateway-url names it, or the
// first --write trusts the one status names and keeps it in the pin file; from then on an
// endpoint on another origin is refused until --gateway-url names that one. An endpoint on this
// machine (dev's gateway) is not pinned: its token stays on this machine.

// gatewayURLFlag names the gateway a user trusts, in connect and adopt.
const (
	gatewayURLFlag  = "gateway-url"
	gatewayURLUsage = "the gateway's URL you trust (https://HOST[:PORT]): the endpoints status names must be on its host; " +
		"kept as this cluster's gateway in ${XDG_CONFIG_HOME:-~/.config}/projectmcp/gateways.json, in place of the one trusted before"
)

// gatewayPinFile is where the trusted gateways are kept: the user's config folder
// (${XDG_CONFIG_HOME:-~/.config} on Linux).
func gatewayPinFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no folder to keep the trusted gateways in (%w): pass --%s", err, gatewayURLFlag)
	}
	return filepath.Join(dir, "projectmcp", "gateways.json"), nil
}

// gatewayPins maps a cluster's API server URL to the origin of the gateway trusted for it.
type gatewayPins map[string]string

// loadPins reads the pin file; a missing one holds no pin.
func loadPins(path string) (gatewayPins, error) {
	pins := gatewayPins{}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return pins, nil
	}
	if err == nil {
		err = json.Unmarshal(data, &pins)
	}
	if err != nil {
		return nil, fmt.Errorf("the trusted gateways in %s: %w (remove the file to trust anew)", path, err)
	}
	return pins, nil
}

// savePins writes the pin file whole, readable by its owner alone.
func savePins(path string, pins gatewayPins) error {
	data, err := json.MarshalIndent(pins, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeFileAtomic(path, append(data, '\n'), 0o600)
}

// originOf is a URL's scheme and host, lower case, without the scheme's default port: two
// spellings of one gateway have one origin.
func originOf(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http(s) URL with a host", raw)
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); port == "443" && u.Scheme == "https" || port == "80" && u.Scheme == "http" {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return u.Scheme + "://" + host, nil
}

// trustedOrigin is the gateway origin the targets are held to: --gateway-url's (flag), else the
// cluster's pin, else on first use the one origin the targets off this machine name (firstUse;
// "" when every target is on this machine). Targets naming two origins on first use are
// refused: one gateway serves a project and its servers.
func trustedOrigin(flag, pinned string, targets []endpointEntry) (origin string, firstUse bool, err error) {
	switch {
	case flag != "":
		return flag, false, nil
	case pinned != "":
		return pinned, false, nil
	}
	for _, t := range targets {
		o, err := originOf(t.url)
		if err != nil || loopbackURL(t.url) {
			continue // checkEndpoint refuses a URL without a host
		}
		if origin != "" && o != origin {
			return "", false, fmt.Errorf("the ProjectMCP's status names two gateways, %s and %s, and none is trusted yet for this cluster: "+
				"pass --%s with the one you trust", origin, o, gatewayURLFlag)
		}
		origin = o
	}
	return origin, origin != "", nil
}

// checkPinned refuses each target off this machine whose origin is not origin, naming the
// entry, the status field, the host and how to trust it.
func checkPinned(key fmt.Stringer, targets []endpointEntry, origin, pinFile string) error {
	var errs []error
	for _, t := range targets {
		o, err := originOf(t.url)
		if err != nil || loopbackURL(t.url) || o == origin {
			continue
		}
		errs = append(errs, fmt.Errorf("projectmcp %s, entry %q: %s names %s, not the gateway trusted for this cluster (%s, kept in %s): "+
			"whoever may write the ProjectMCP's status could collect the agent's tokens there. If %s is your gateway, pass --%s %s to trust it",
			key, t.name, t.field, o, origin, pinFile, o, gatewayURLFlag, o))
	}
	return errors.Join(errs...)
}

// gatewayTrust holds a command's targets to the cluster's trusted gateway, and keeps the
// gateway trusted when the user named it (--gateway-url) or a first --write met it.
type gatewayTrust struct {
	file, cluster string // the pin file, and the API server URL the pin is kept under
	flag          string // --gateway-url's origin, or ""
	write         bool   // the command writes the entries (a first use is then kept)
}

// hold checks targets against the trusted gateway and keeps it when it is new, saying so.
func (g gatewayTrust) hold(key fmt.Stringer, targets []endpointEntry, stderr io.Writer) error {
	pins, err := loadPins(g.file)
	if err != nil {
		return err
	}
	origin, firstUse, err := trustedOrigin(g.flag, pins[g.cluster], targets)
	if err != nil {
		return fmt.Errorf("projectmcp %s: %w", key, err)
	}
	if err := checkPinned(key, targets, origin, g.file); err != nil {
		return err
	}
	if origin == "" || origin == pins[g.cluster] || firstUse && !g.write {
		return nil
	}
	pins[g.cluster] = origin
	if err := savePins(g.file, pins); err != nil {
		return fmt.Errorf("keeping the trusted gateway: %w", err)
	}
	fmt.Fprintf(stderr, "Trusting the gateway %s for the cluster at %s (kept in %s): an endpoint on another host is refused until --%s names it.\n",
		origin, g.cluster, g.file, gatewayURLFlag)
	return nil
}

// newGatewayTrust is the trust for the kubeconfig's cluster, with --gateway-url's URL (or "").
func newGatewayTrust(g *globalFlags, flagURL string, write bool) (gatewayTrust, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return gatewayTrust{}, err
	}
	file, err := gatewayPinFile()
	if err != nil {
		return gatewayTrust{}, err
	}
	t := gatewayTrust{file: file, cluster: cfg.Host, write: write}
	if flagURL != "" {
		t.flag, err = originOf(flagURL) // checkGatewayURL refused it before if it names no gateway
	}
	return t, err
}
