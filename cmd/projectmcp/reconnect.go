package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

const reconnectLong = `Rebuilds a project's connections now, every server or the ones --server names, even a
Failed one whose reconnect budget is spent. It sets the annotation
mcp.dsh.dev/reconnect-requested-at to a new value (and mcp.dsh.dev/reconnect-servers); with
--wait it waits until status.lastHandledReconnectAt shows the request handled and the
rebuilt servers have left Connecting, and prints each server's phase.`

func newReconnectCmd(g *globalFlags, stdout io.Writer) *cobra.Command {
	var servers []string
	var wait time.Duration
	cmd := onProject(g, &cobra.Command{
		Use:   "reconnect NAME",
		Short: "Rebuild a project's connections now (all, or --server S)",
		Long:  reconnectLong,
		Example: `  # rebuild every connection of projectmcp shop
  projectmcp reconnect shop

  # rebuild one server's and wait until it is handled
  projectmcp reconnect shop --server memory --wait 30s`,
	}, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
		return reconnect(ctx, c, key, servers, wait, stdout)
	})
	cmd.Flags().StringArrayVar(&servers, "server", nil, "rebuild only this server (repeatable; default: every server)")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait this long for the controller to handle the request (0: do not wait)")
	return cmd
}

// reconnect asks the controller to rebuild a project's connections (the panel's "Reconnect")
// and, with a wait, waits until status records that the request was handled.
func reconnect(ctx context.Context, c client.Client, key types.NamespacedName, servers []string, wait time.Duration, stdout io.Writer) error {
	token := time.Now().UTC().Format(time.RFC3339Nano)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		v1alpha1.AnnotationReconnectRequestedAt: token,
		v1alpha1.AnnotationReconnectServers:     strings.Join(servers, ","),
	}}})
	obj := &v1alpha1.ProjectMCP{}
	obj.Name, obj.Namespace = key.Name, key.Namespace
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "reconnect of projectmcp %s requested (%s)\n", key, token)
	if wait <= 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		// Handled, and the rebuilt connections have come up (or failed): a rebuild tears the
		// old connection down first, so the request is handled while the new one connects.
		if err := c.Get(ctx, key, obj); err == nil && obj.Status.LastHandledReconnectAt == token && settled(obj, servers) {
			fmt.Fprintf(stdout, "handled: %s\n", summary(obj))
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the controller did not handle the request within %s", wait)
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

// onProject makes cmd a command about one ProjectMCP, named by its one argument in the
// namespace the global flags choose (completed from the cluster): run gets the client and the
// project's key.
func onProject(g *globalFlags, cmd *cobra.Command, run func(ctx context.Context, c client.Client, key types.NamespacedName) error) *cobra.Command {
	cmd.Args = positional([]string{"NAME"})
	cmd.ValidArgsFunction = completeProjects(g)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, ns, err := g.target()
		if err != nil {
			return err
		}
		return run(cmd.Context(), c, types.NamespacedName{Namespace: ns, Name: args[0]})
	}
	return cmd
}

// completeProjects completes a NAME argument with the ProjectMCPs in the namespace.
func completeProjects(g *globalFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, ns, err := g.target()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
		defer cancel()
		list := &v1alpha1.ProjectMCPList{}
		if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []cobra.Completion
		for _, p := range list.Items {
			names = append(names, p.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}
