package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// runStatus prints a project's state for people without kubectl: conditions, then one row per
// server (phase, connection, tools, sessions, last error), then the sessions.
func runStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	namespace := fs.String("namespace", "default", "namespace of the ProjectMCP")
	if err := parseInterspersed(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: projectmcp status NAME [--namespace NS]")
		return 2
	}
	c, err := newClient(*kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp status: %v\n", err)
		return 1
	}
	obj := &v1alpha1.ProjectMCP{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: *namespace, Name: fs.Arg(0)}, obj); err != nil {
		fmt.Fprintf(stderr, "projectmcp status: %v\n", err)
		return 1
	}
	printStatus(stdout, obj)
	return 0
}

func printStatus(w io.Writer, obj *v1alpha1.ProjectMCP) {
	st := obj.Status
	fmt.Fprintf(w, "projectmcp %s/%s\n  endpoint: %s\n", obj.Namespace, obj.Name, st.Endpoint)
	for _, t := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionDegraded, v1alpha1.ConditionConfigSynced} {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil {
			fmt.Fprintf(w, "  %s: %s (%s) %s\n", t, c.Status, c.Reason, c.Message)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSERVER\tPHASE\tCONNECTION\tTOOLS\tSESSIONS\tLAST ERROR")
	for _, s := range st.Servers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", s.Name, s.Phase, dash(s.Connection), s.ToolCount, s.Sessions, dash(s.LastError))
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
