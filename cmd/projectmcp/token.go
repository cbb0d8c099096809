package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

const tokenLong = `Print the headers an agent sends to a project's gateway, as a JSON object:
{"Authorization": "Bearer <token>"}. Claude Code runs it as an entry's headersHelper, at connect
and again after a 401 or 403, so a session outlives any one token.

The token comes from the kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config):
  - with --service-account, a token minted for that ServiceAccount (a TokenRequest, as
    "kubectl create token" makes it; the kubeconfig's user needs "create" on
    serviceaccounts/token), for --audience and --duration;
  - otherwise the kubeconfig user's own token: a static token, a token file or what its exec
    plugin (an OIDC login such as kubelogin) prints.
A token that expires is kept in the user's cache folder (owner-only) until shortly before it
does, so each run neither mints nor logs in again; --no-cache skips that. When Claude Code runs
it (after a 401, say), it first asks the entry's endpoint ($CLAUDE_CODE_MCP_SERVER_URL) whether
the cached token still passes, and mints anew if not.`

// tokenOptions are token's flags.
type tokenOptions struct {
	audience       string
	serviceAccount string
	duration       time.Duration
	noCache        bool
}

func newTokenCmd(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	o := tokenOptions{duration: time.Hour}
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Print the Authorization header for a gateway that checks Kubernetes tokens (a headersHelper)",
		Long:  tokenLong,
		Example: `  # the kubeconfig user's own token
  projectmcp token

  # a token of ServiceAccount agent in namespace team-a, for a gateway run with --gateway-audience projectmcp
  projectmcp token --service-account team-a/agent --audience projectmcp`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.duration < 10*time.Minute {
				return usageErrorf("--duration must be at least 10m (the API server's shortest token), not %s", o.duration)
			}
			h, err := gatewayHeaders(cmd.Context(), g, o, time.Now(), stderr)
			if err != nil {
				return err
			}
			return json.NewEncoder(stdout).Encode(h)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.audience, "audience", "", "the audience the gateway checks (its --gateway-audience); with --service-account the token is minted for it, otherwise the kubeconfig's token must carry it")
	f.StringVar(&o.serviceAccount, "service-account", "", "mint a token for this ServiceAccount, NAME (in --namespace) or NAMESPACE/NAME")
	f.DurationVar(&o.duration, "duration", o.duration, "how long a minted token lasts (with --service-account)")
	f.BoolVar(&o.noCache, "no-cache", false, "neither read nor write the token cache")
	return cmd
}

// gatewayHeaders is the header object token prints: from the cache while its token has time
// left, else from the kubeconfig's credentials.
func gatewayHeaders(ctx context.Context, g *globalFlags, o tokenOptions, now time.Time, stderr io.Writer) (map[string]string, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	src, err := tokenSourceOf(g, o)
	if err != nil {
		return nil, err
	}
	cache := tokenCache{dir: tokenCacheDir(), key: src.cacheKey(cfg.Host, o.audience)}
	if o.noCache {
		cache.dir = ""
	}
	if t, ok := cache.load(now); ok && !refusedBy(ctx, os.Getenv(serverURLEnv), t.Token) {
		return bearerHeaders(t.Token), nil
	}
	t, err := src.fetch(ctx, cfg, o)
	if err != nil {
		return nil, err
	}
	t.Issued = now
	if err := checkAudience(t.Token, o.audience, src); err != nil {
		return nil, err
	}
	if err := cache.store(t); err != nil {
		fmt.Fprintf(stderr, "projectmcp token: not cached: %v\n", err)
	}
	return bearerHeaders(t.Token), nil
}

// serverURLEnv is the variable Claude Code sets to the entry's URL when it runs a
// headersHelper.
const serverURLEnv = "CLAUDE_CODE_MCP_SERVER_URL"

// refusedBy reports whether the gateway at endpoint refuses token (401). Claude Code runs the
// helper again after a 401, and a cached token the gateway refused before its time (its
// ServiceAccount made anew, its issuer's keys rotated) would otherwise be printed again until
// it expires. HEAD starts no session; an endpoint that cannot be asked keeps the token.
func refusedBy(ctx context.Context, endpoint, token string) bool {
	if endpoint == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, endpoint, nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusUnauthorized
}

func bearerHeaders(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// tokenSource is where a token comes from: a ServiceAccount's TokenRequest, or (namespace and
// name empty) the kubeconfig user's own credentials.
type tokenSource struct {
	namespace, name string
	kubeconfig      string
}

func tokenSourceOf(g *globalFlags, o tokenOptions) (tokenSource, error) {
	src := tokenSource{kubeconfig: g.kubeconfig}
	if o.serviceAccount == "" {
		return src, nil
	}
	ns, name, found := strings.Cut(o.serviceAccount, "/")
	if !found {
		var err error
		if ns, err = g.ns(); err != nil {
			return src, err
		}
		name = o.serviceAccount
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return src, usageErrorf("--service-account: %q is not NAME or NAMESPACE/NAME", o.serviceAccount)
	}
	src.namespace, src.name = ns, name
	return src, nil
}

// cacheKey names a cached token by everything that chose it: the cluster, the source and the
// audience (the kubeconfig's path too: two kubeconfigs may name different users of one
// cluster).
func (s tokenSource) cacheKey(host, audience string) string {
	kc := s.kubeconfig
	if kc == "" {
		kc = os.Getenv("KUBECONFIG")
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{host, kc, s.namespace, s.name, audience}, "\x00")))
	return hex.EncodeToString(sum[:16])
}

func (s tokenSource) String() string {
	if s.name == "" {
		return "the kubeconfig's token"
	}
	return "ServiceAccount " + s.namespace + "/" + s.name
}

// cachedToken is a token, when it was issued and when it stops being valid (zero: unknown,
// never cached).
type cachedToken struct {
	Token   string    `json:"token"`
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
}

func (s tokenSource) fetch(ctx context.Context, cfg *rest.Config, o tokenOptions) (cachedToken, error) {
	if s.name != "" {
		return mintToken(ctx, cfg, s, o)
	}
	token, err := kubeconfigToken(ctx, cfg)
	if err != nil {
		return cachedToken{}, err
	}
	return cachedToken{Token: token, Expires: jwtExpiry(token)}, nil
}

// mintToken asks the API server for a token of the ServiceAccount, as kubectl create token does.
func mintToken(ctx context.Context, cfg *rest.Config, s tokenSource, o tokenOptions) (cachedToken, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return cachedToken{}, err
	}
	req := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: new(int64(o.duration / time.Second))}}
	if o.audience != "" {
		req.Spec.Audiences = []string{o.audience}
	}
	tr, err := cs.CoreV1().ServiceAccounts(s.namespace).CreateToken(ctx, s.name, req, metav1.CreateOptions{})
	if err != nil {
		return cachedToken{}, fmt.Errorf("minting a token for %s: %w", s, err)
	}
	return cachedToken{Token: tr.Status.Token, Expires: tr.Status.ExpirationTimestamp.Time}, nil
}

// kubeconfigToken is the bearer token the kubeconfig's user sends: client-go's own transport
// adds it (a static token, a token file, an exec plugin's or an auth provider's) to a request
// that goes nowhere.
func kubeconfigToken(ctx context.Context, cfg *rest.Config) (string, error) {
	tc, err := cfg.TransportConfig()
	if err != nil {
		return "", fmt.Errorf("the kubeconfig's credentials: %w", err)
	}
	var seen string
	capture := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen = r.Header.Get("Authorization")
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	})
	rt, err := transport.HTTPWrappersForConfig(tc, capture)
	if err != nil {
		return "", fmt.Errorf("the kubeconfig's credentials: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", fmt.Errorf("the kubeconfig's credentials: %w", err)
	}
	resp.Body.Close()
	token, ok := strings.CutPrefix(seen, "Bearer ")
	if !ok || token == "" {
		return "", errors.New("the kubeconfig's user has no bearer token (it signs in with a client certificate or a password): " +
			"pass --service-account NAME to mint one for a ServiceAccount")
	}
	return token, nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// jwtClaims are the claims of a JWT token reads to cache it and to check its audience; the
// signature is the gateway's TokenReview's to check, not this command's.
type jwtClaims struct {
	Exp int64           `json:"exp"`
	Aud json.RawMessage `json:"aud"`
}

// claimsOf reads a JWT's claims, ok false for a token that is not one (an opaque token).
func claimsOf(token string) (jwtClaims, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return jwtClaims{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return jwtClaims{}, false
	}
	var c jwtClaims
	if json.Unmarshal(raw, &c) != nil {
		return jwtClaims{}, false
	}
	return c, true
}

// jwtExpiry is when a JWT expires; zero for an opaque token or one without exp.
func jwtExpiry(token string) time.Time {
	c, ok := claimsOf(token)
	if !ok || c.Exp <= 0 {
		return time.Time{}
	}
	return time.Unix(c.Exp, 0)
}

// audiences is a JWT's aud claim, which is a string or a list of them.
func (c jwtClaims) audiences() []string {
	var one string
	if json.Unmarshal(c.Aud, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(c.Aud, &many)
	return many
}

// checkAudience refuses, before any agent sends it, a kubeconfig token the gateway would
// refuse for its audience. Minted tokens carry it by construction; an opaque token cannot be
// read and is left to the gateway.
func checkAudience(token, audience string, src tokenSource) error {
	if audience == "" || src.name != "" {
		return nil
	}
	c, ok := claimsOf(token)
	if !ok {
		return nil
	}
	if aud := c.audiences(); !slices.Contains(aud, audience) {
		return fmt.Errorf("%s is for the audiences %q, and the gateway wants %q: pass --service-account NAME to mint one for it", src, aud, audience)
	}
	return nil
}

// tokenCache keeps one token per key in a file only its owner reads. dir "" keeps nothing.
type tokenCache struct {
	dir, key string
}

// tokenCacheDir is the user's cache folder's projectmcp/tokens ("" when there is none).
func tokenCacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(base, "projectmcp", "tokens")
}

// freshFor is how long before its expiry a cached token is replaced: a fifth of its life, at
// most five minutes, so that a request sent with it still arrives in time.
func freshFor(life time.Duration) time.Duration {
	return min(life/5, 5*time.Minute)
}

func (c tokenCache) path() string { return filepath.Join(c.dir, c.key+".json") }

// load is the cached token while it has time left.
func (c tokenCache) load(now time.Time) (cachedToken, bool) {
	if c.dir == "" {
		return cachedToken{}, false
	}
	b, err := os.ReadFile(c.path())
	if err != nil {
		return cachedToken{}, false
	}
	var t cachedToken
	if json.Unmarshal(b, &t) != nil || t.Token == "" || t.Expires.IsZero() {
		return cachedToken{}, false
	}
	if now.Add(freshFor(t.Expires.Sub(t.Issued))).After(t.Expires) {
		return cachedToken{}, false
	}
	return t, true
}

// store writes a token that expires (one that does not is read afresh each time, which costs
// nothing) through a file renamed into place, so that a concurrent load sees the old token or
// the new one whole.
func (c tokenCache) store(t cachedToken) error {
	if c.dir == "" || t.Expires.IsZero() {
		return nil
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, c.key+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), c.path())
}
