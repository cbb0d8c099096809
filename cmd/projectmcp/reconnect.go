package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// runReconnect asks the controller to rebuild a project's connections now (the panel's
// "Reconnect"): it sets the reconnect annotation to a new value, and with --wait waits until
// status records that the request was handled.
func runReconnect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reconnect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	namespace := fs.String("namespace", "default", "namespace of the ProjectMCP")
	wait := fs.Duration("wait", 0, "wait this long for the controller to handle the request (0: do not wait)")
	var servers stringList
	fs.Var(&servers, "server", "rebuild only this server (repeatable; default: every server)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: projectmcp reconnect NAME [--server S]... [--namespace NS] [--wait 30s]")
		fs.PrintDefaults()
	}
	if err := parseInterspersed(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	c, err := newClient(*kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp reconnect: %v\n", err)
		return 1
	}
	ctx := context.Background()
	key := types.NamespacedName{Namespace: *namespace, Name: fs.Arg(0)}
	token := time.Now().UTC().Format(time.RFC3339Nano)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		v1alpha1.AnnotationReconnectRequestedAt: token,
		v1alpha1.AnnotationReconnectServers:     strings.Join(servers, ","),
	}}})
	obj := &v1alpha1.ProjectMCP{}
	obj.Name, obj.Namespace = key.Name, key.Namespace
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		fmt.Fprintf(stderr, "projectmcp reconnect: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "reconnect of projectmcp %s requested (%s)\n", key, token)
	if *wait <= 0 {
		return 0
	}
	deadline := time.Now().Add(*wait)
	for time.Now().Before(deadline) {
		// Handled, and the rebuilt connections have come up (or failed): a rebuild tears the
		// old connection down first, so the request is handled while the new one connects.
		if err := c.Get(ctx, key, obj); err == nil && obj.Status.LastHandledReconnectAt == token && settled(obj, servers) {
			fmt.Fprintf(stdout, "handled: %s\n", summary(obj))
			return 0
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintf(stderr, "projectmcp reconnect: the controller did not handle the request within %s\n", *wait)
	return 1
}

// settled reports whether every server a reconnect covers (servers, or all when empty) has
// left Connecting.
func settled(obj *v1alpha1.ProjectMCP, servers []string) bool {
	for _, s := range obj.Status.Servers {
		if (len(servers) == 0 || slices.Contains(servers, s.Name)) && s.Phase == v1alpha1.PhaseConnecting {
			return false
		}
	}
	return true
}

// summary is one line per server: name, phase, connection, tools.
func summary(obj *v1alpha1.ProjectMCP) string {
	var parts []string
	for _, s := range obj.Status.Servers {
		parts = append(parts, fmt.Sprintf("%s %s (connection %s, %d tools)", s.Name, s.Phase, s.Connection, s.ToolCount))
	}
	return strings.Join(parts, "; ")
}

// newClient builds a client for the kubeconfig's cluster.
func newClient(kubeconfig string) (client.Client, error) {
	f := controllerFlags{kubeconfig: kubeconfig}
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// parseInterspersed parses flags that may come after positional arguments (NAME --server a).
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	return fs.Parse(positional)
}
