package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

func newStatusCmd(g *globalFlags, stdout io.Writer) *cobra.Command {
	return onProject(g, &cobra.Command{
		Use:   "status NAME",
		Short: "Show a project's servers, connections, tools and sessions",
		Long: `Prints a project's state for people without kubectl: the endpoint, the replica serving it
and the conditions, one row per server (phase, sharing scope, how many connections, the
connection whose tools are offered, tools, sessions, requests waiting for their turn now and
ever, last error), the state of each server's OAuth grant (its token's expiry and scopes, and
what to run when it needs projectmcp login), then the sessions and the connection each of
their slots is bound to.`,
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

// printStatus prints a project's status. Every string that a client, a server or an author
// chose passes through shown: status is readable by anyone with get, and a raw escape sequence
// would act on the operator's terminal.
func printStatus(w io.Writer, obj *v1alpha1.ProjectMCP) {
	st := obj.Status
	fmt.Fprintf(w, "projectmcp %s/%s\n  endpoint: %s\n", obj.Namespace, obj.Name, shown(st.Endpoint))
	if o := st.Owner; o != nil {
		fmt.Fprintf(w, "  served by: %s (bucket %d, epoch %d)\n", shown(o.Replica), o.Bucket, o.Epoch)
	}
	for _, t := range statusConditions {
		if c := meta.FindStatusCondition(st.Conditions, t); c != nil && !quiet(c) {
			fmt.Fprintf(w, "  %s: %s (%s) %s\n", t, c.Status, shown(c.Reason), shown(c.Message))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSERVER\tPHASE\tSHARE\tCONNECTIONS\tCONNECTION\tTOOLS\tSESSIONS\tWAITING\tWAITED\tLAST ERROR")
	for _, s := range st.Servers {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\n", shown(s.Name), s.Phase, dash(shown(string(s.Share))), s.Connections,
			dash(shown(s.Connection)), s.ToolCount, s.Sessions, s.Waiting, s.Waited, dash(shown(s.LastError)))
	}
	tw.Flush()
	for _, s := range st.Servers {
		if s.Sandbox != "" {
			fmt.Fprintf(w, "  %s sandbox: %s\n", shown(s.Name), shown(s.Sandbox))
		}
	}
	printCredentials(w, st.Servers)
	fmt.Fprintf(w, "\n%d connections, %d sessions\n", st.ConnectionCount, st.SessionCount)
	for _, s := range st.Sessions {
		var slots []string
		for _, sl := range s.Slots {
			slots = append(slots, shown(sl.Server)+"→"+dash(shown(sl.Connection)))
		}
		fmt.Fprintf(w, "  %s  %s  since %s  %s\n", shown(s.ID), dash(shown(s.Client)), s.BoundAt.Format("15:04:05"), strings.Join(slots, " "))
	}
}

// statusConditions are the conditions status prints, in this order.
var statusConditions = []string{v1alpha1.ConditionReady, v1alpha1.ConditionDegraded, v1alpha1.ConditionConfigSynced, v1alpha1.ConditionSharedStatefulServer}

// quiet is a warning that does not warn: SharedStatefulServer is printed only while True.
func quiet(c *metav1.Condition) bool {
	return c.Type == v1alpha1.ConditionSharedStatefulServer && c.Status != metav1.ConditionTrue
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shown is s safe to print on a terminal: control characters (ESC, BEL, CR, tab and newline
// among them, so no ANSI or OSC sequence and no rewritten line), bidirectional overrides
// (which reorder what is read) and invalid UTF-8 are written as Go escapes; the rest is kept.
func shown(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// printCredentials prints the state of each server's OAuth grant: its state, the token's
// expiry and scopes, and why when it is not Ready (never a token: status holds none).
func printCredentials(w io.Writer, servers []v1alpha1.ServerStatus) {
	first := true
	for _, s := range servers {
		c := s.Credential
		if c == nil {
			continue
		}
		if first {
			fmt.Fprintln(w, "\ncredentials:")
			first = false
		}
		line := fmt.Sprintf("  %s: %s (Secret %s)", shown(s.Name), shown(c.State), shown(c.Secret))
		if c.ExpiresAt != nil {
			line += ", token until " + c.ExpiresAt.UTC().Format(time.RFC3339)
		}
		if len(c.Scopes) > 0 {
			line += ", scopes " + shown(strings.Join(c.Scopes, " "))
		}
		if cond := meta.FindStatusCondition(c.Conditions, v1alpha1.ConditionCredentialReady); cond != nil && cond.Message != "" {
			line += ": " + shown(cond.Message)
		} else if cond := meta.FindStatusCondition(c.Conditions, v1alpha1.ConditionCredentialRefreshFailed); cond != nil && cond.Message != "" {
			line += ": " + shown(cond.Message)
		}
		fmt.Fprintln(w, line)
	}
}
