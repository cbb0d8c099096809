package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

func newStatusCmd(g *globalFlags, stdout io.Writer) *cobra.Command {
	return onProject(g, &cobra.Command{
		Use:   "status NAME",
		Short: "Show a project's servers, connections, tools and sessions",
		Long: `Prints a project's state for people without kubectl: the endpoint, the replica serving it
and the conditions, one row per server (phase, connection, tools, sessions, requests waiting
for their turn now and ever, last error), then the sessions.`,
		Example: `  projectmcp status shop
  projectmcp status web -n team-a --kubeconfig ~/.kube/prod`,
	}, func(ctx context.Context, c client.Client, key types.NamespacedName) error {
		obj := &v1alpha1.ProjectMCP{}
		if err := c.Get(ctx, key, obj); err != nil {
			return err
		}
		printStatus(stdout, obj)
		return nil
	})
}

func printStatus(w io.Writer, obj *v1alpha1.ProjectMCP) {
	st := obj.Status
	fmt.Fprintf(w, "projectmcp %s/%s\n  endpoint: %s\n", obj.Namespace, obj.Name, st.Endpoint)
	if o := st.Owner; o != nil {
		fmt.Fprintf(w, "  served by: %s (bucket %d, epoch %d)\n", o.Replica, o.Bucket, o.Epoch)
	}
	for _, t := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionDegraded, v1alpha1.ConditionConfigSynced} {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
			fmt.Fprintf(w, "  %s: %s (%s) %s\n", t, c.Status, c.Reason, c.Message)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSERVER\tPHASE\tCONNECTION\tTOOLS\tSESSIONS\tWAITING\tWAITED\tLAST ERROR")
	for _, s := range st.Servers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Name, s.Phase, dash(s.Connection), s.ToolCount, s.Sessions, s.Waiting, s.Waited, dash(s.LastError))
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d sessions\n", st.SessionCount)
	for _, s := range st.Sessions {
		var slots []string
		for _, sl := range s.Slots {
			slots = append(slots, sl.Server+"→"+dash(sl.Connection))
		}
		fmt.Fprintf(w, "  %s  %s  since %s  %s\n", s.ID, dash(s.Client), s.BoundAt.Format("15:04:05"), strings.Join(slots, " "))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
