package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/oauth"
)

const loginLong = `Signs in to a project's remote server that needs OAuth, on this machine, and stores the
grant as a Secret in the project's namespace, written with your own kubeconfig: the controller
then sends the server its token, refreshes it before it expires and shows its state in
status. The server is discovered from its 401 (RFC 9728, RFC 8414 or OpenID discovery); the
client is the server's oauth.clientId, else one registered now (RFC 7591). The sign-in is the
authorization code flow with PKCE: the browser opens the authorization server's page (or, with
--no-browser, the URL is printed) and comes back to a loopback redirect on oauth.callbackPort
or a free port. For oauth.grant clientCredentials no browser is involved: the client's secret
(--client-secret-file) is exchanged for a token, and kept so that the controller can ask again.
NAME defaults to the name of the project folder's .dsh/mcp.json (--project).`

type loginOptions struct {
	project    string
	noBrowser  bool
	secretFile string
	keyFile    string
	timeout    time.Duration
}

func newLoginCmd(g *globalFlags, stdout io.Writer) *cobra.Command {
	o := loginOptions{project: ".", timeout: 5 * time.Minute}
	cmd := &cobra.Command{
		Use:   "login [NAME] SERVER",
		Short: "Sign in to a project's server that needs OAuth; the controller keeps the grant",
		Long:  loginLong,
		Example: `  # sign in to the linear server of the project in this folder
  projectmcp login linear

  # of projectmcp shop, printing the URL to open instead of opening a browser
  projectmcp login shop linear --no-browser

  # a machine grant: the client's secret from stdin
  projectmcp login shop ci-api --client-secret-file - < secret.txt`,
		Args: positional([]string{"SERVER"}, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, server, err := loginTarget(g, o.project, args)
			if err != nil {
				return err
			}
			return login(cmd.Context(), g, key, server, o, cmd.InOrStdin(), stdout)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.project, "project", o.project, "project folder whose name NAME defaults to")
	fs.BoolVar(&o.noBrowser, "no-browser", false, "print the sign-in URL and open no browser")
	fs.StringVar(&o.secretFile, "client-secret-file", "", `a file holding the client's secret ("-": stdin), for a pre-registered confidential client or client credentials`)
	fs.StringVar(&o.keyFile, "private-key-file", "", "a PEM file holding the client's private key, for tokenEndpointAuthMethod private_key_jwt")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "how long to wait for the sign-in")
	_ = cmd.MarkFlagDirname("project")
	return cmd
}

func newLogoutCmd(g *globalFlags, stdout io.Writer) *cobra.Command {
	project := "."
	cmd := &cobra.Command{
		Use:   "logout [NAME] SERVER",
		Short: "Delete a project's grant for a server; the server's tools go until the next login",
		Long: `Deletes the Secret holding a project's grant for a server (projectmcp login made it). The
controller then stops sending the server a token, and its status says to run projectmcp
login. The authorization server is not told: revoke the grant there too if it was leaked.`,
		Example: `  projectmcp logout shop linear`,
		Args:    positional([]string{"SERVER"}, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, server, err := loginTarget(g, project, args)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			s := &corev1.Secret{}
			s.Name, s.Namespace = oauth.SecretName(key.Name, server), key.Namespace
			if err := c.Delete(cmd.Context(), s); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("projectmcp %s has no grant for server %q (no Secret %s)", key, server, s.Name)
				}
				return err
			}
			fmt.Fprintf(stdout, "deleted the grant of server %q of projectmcp %s (Secret %s)\n", server, key, s.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&project, "project", project, "project folder whose name NAME defaults to")
	return cmd
}

// loginTarget is the project and server a login's arguments name: [NAME] SERVER.
func loginTarget(g *globalFlags, project string, args []string) (types.NamespacedName, string, error) {
	server := args[len(args)-1]
	key, err := connectTarget(g, project, args[:len(args)-1])
	return key, server, err
}

func login(ctx context.Context, g *globalFlags, key types.NamespacedName, server string, o loginOptions, stdin io.Reader, stdout io.Writer) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	obj := &v1alpha1.ProjectMCP{}
	if err := c.Get(ctx, key, obj); err != nil {
		return err
	}
	h, err := remoteServer(obj, server)
	if err != nil {
		return err
	}
	secret, err := readClientSecret(o.secretFile, stdin)
	if err != nil {
		return err
	}
	clientKey, err := readClientKey(o.keyFile)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	l := &oauth.Login{HTTP: &http.Client{Timeout: time.Minute}, ServerURL: h.URL, Settings: oauth.SettingsOf(h.OAuth),
		ClientSecret: secret, ClientKey: clientKey, Out: stdout}
	if !o.noBrowser {
		l.Browser = openBrowser
	}
	grant, err := l.Run(ctx)
	if err != nil {
		return fmt.Errorf("signing in to server %q: %w", server, err)
	}
	name, err := storeGrant(ctx, c, oauth.GrantSecret(key.Namespace, key.Name, server, grant))
	if err != nil {
		return fmt.Errorf("storing the grant of server %q: %w", server, err)
	}
	fmt.Fprintf(stdout, "signed in to server %q of projectmcp %s; the grant is in Secret %s", server, key, name)
	if !grant.Expiry.IsZero() {
		fmt.Fprintf(stdout, " (token until %s)", grant.Expiry.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(stdout)
	if h.OAuth == nil {
		fmt.Fprintf(stdout, "note: server %q has no \"oauth\" in its config, and the controller sends a grant's token only to a server with one: add \"oauth\": {} to its entry in .dsh/mcp.json\n", server)
	}
	return nil
}

// remoteServer is the spec of a project's remote server, with a URL login can reach as written.
func remoteServer(obj *v1alpha1.ProjectMCP, name string) (*v1alpha1.HTTPServer, error) {
	for _, s := range obj.Spec.Servers {
		switch {
		case s.Name != name:
			continue
		case s.HTTP == nil:
			return nil, usageErrorf("server %q of projectmcp %s/%s is a stdio server; only remote servers sign in", name, obj.Namespace, obj.Name)
		case strings.Contains(s.HTTP.URL, "${"):
			return nil, usageErrorf("server %q: its url refers to variables, which only the controller resolves; login needs the URL written out", name)
		}
		return s.HTTP, nil
	}
	return nil, usageErrorf("projectmcp %s/%s has no server %q", obj.Namespace, obj.Name, name)
}

// readClientSecret reads a client secret from a file, or stdin for "-"; none for "".
func readClientSecret(file string, stdin io.Reader) (string, error) {
	var data []byte
	var err error
	switch file {
	case "":
		return "", nil
	case "-":
		data, err = io.ReadAll(io.LimitReader(stdin, 64<<10))
	default:
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return "", fmt.Errorf("--client-secret-file: %w", err)
	}
	secret := strings.TrimSpace(string(data))
	if secret == "" {
		return "", errors.New("--client-secret-file: it is empty")
	}
	return secret, nil
}

// readClientKey reads a client's PEM private key, checking that it is one; none for "".
func readClientKey(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--private-key-file: %w", err)
	}
	if _, err := oauth.ParsePrivateKey(string(data)); err != nil {
		return "", fmt.Errorf("--private-key-file: %w", err)
	}
	return string(data), nil
}

// storeGrant creates the grant's Secret, or replaces the data of the one there (a new login
// replaces the old grant; the controller watches it and takes the new one).
func storeGrant(ctx context.Context, c client.Client, s *corev1.Secret) (string, error) {
	err := c.Create(ctx, s)
	if !apierrors.IsAlreadyExists(err) {
		return s.Name, err
	}
	old := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), old); err != nil {
		return "", err
	}
	old.Data, old.Type = s.Data, s.Type
	if old.Labels == nil {
		old.Labels = map[string]string{}
	}
	if old.Annotations == nil {
		old.Annotations = map[string]string{}
	}
	for k, v := range s.Labels {
		old.Labels[k] = v
	}
	for k, v := range s.Annotations {
		old.Annotations[k] = v
	}
	return s.Name, c.Update(ctx, old)
}

// openBrowser opens u in the user's browser, as the desktop opens a link.
func openBrowser(u string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", u)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", u)
	default:
		cmd = exec.Command("xdg-open", u)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
