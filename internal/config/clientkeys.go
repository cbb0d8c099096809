package config

import (
	"fmt"
	"math/big"
	"net/url"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// The keys below are those Claude Code's and VS Code's server entries have beyond the
// definition of the server itself. Each has a meaning here, so a file a client reads is read
// here too: it is carried into the spec, or ignored because it only concerns the client's own
// workings ("dev"), or refused naming what to write instead ("envFile").

var (
	oauthKeys = []string{"clientId", "callbackPort", "authServerMetadataUrl", "scopes",
		// projectmcp's own, for what identity providers need
		"resource", "audience", "authorizeParams", "tokenEndpointAuthMethod", "grant"}
	sandboxKeys    = []string{"filesystem", "network"}
	filesystemKeys = []string{"allowWrite", "denyRead", "denyWrite"}
	networkKeys    = []string{"allowedDomains", "deniedDomains"}
)

// maxSandboxItems is the most entries of one sandbox list (the CRD's MaxItems).
const maxSandboxItems = 64

// clientKeys reads a server's client keys into s.
func (p *parser) clientKeys(s *v1alpha1.MCPServer, fields map[string]member, in string) {
	s.Timeout = p.callTimeout(fields, in)
	if f, ok := fields["alwaysLoad"]; ok && p.expectKind(f.value, kindBool, fmt.Sprintf("%q%s", f.key, in)) {
		s.AlwaysLoad = f.value.boolean
	}
	if f, ok := fields["envFile"]; ok {
		p.errorf(f.keyAt, "\"envFile\"%s is not carried: the controller reads no file of the project for values; "+
			"list each variable in \"env\" as ${NAME}, resolved from the Secret spec.secretRef names (projectmcp adopt does this)", in)
	}
	if f, ok := fields["dev"]; ok {
		// dev is VS Code's own watch-and-debug loop of a server it runs; here it has no meaning
		// and is ignored.
		p.expectKind(f.value, kindObject, fmt.Sprintf("%q%s", f.key, in))
	}
	if s.HTTP != nil {
		s.HTTP.HeadersHelper = p.plainString(fields["headersHelper"], in)
		if f, ok := fields["oauth"]; ok {
			s.HTTP.OAuth = p.oauth(f.value, in)
		}
	}
	if s.Stdio != nil {
		s.Sandbox = p.sandbox(fields, in)
	}
}

// callTimeout reads "timeout" and "request_timeout_ms", both in milliseconds; with both, the
// shorter is the deadline, as a call must end within each.
func (p *parser) callTimeout(fields map[string]member, in string) *metav1.Duration {
	var out *metav1.Duration
	for _, key := range []string{"timeout", "request_timeout_ms"} {
		f, ok := fields[key]
		if !ok {
			continue
		}
		d := p.positiveMillis(f.value, fmt.Sprintf("%q%s", key, in))
		if d != nil && (out == nil || d.Duration < out.Duration) {
			out = d
		}
	}
	return out
}

// positiveMillis reads a whole number of milliseconds greater than zero.
func (p *parser) positiveMillis(n *node, what string) *metav1.Duration {
	if !p.expectKind(n, kindNumber, what) {
		return nil
	}
	v, ok := new(big.Rat).SetString(n.str)
	switch {
	case !ok || !v.IsInt():
		p.errorf(n.at, "%s must be a whole number of milliseconds, not %s", what, n.str)
	case v.Sign() <= 0:
		p.errorf(n.at, "%s must be greater than 0 (leave it out for no deadline)", what)
	case v.Cmp(new(big.Rat).SetInt64(MaxTimeoutMs)) > 0:
		p.errorf(n.at, "%s is %s; the largest accepted is %d", what, n.str, MaxTimeoutMs)
	default:
		return &metav1.Duration{Duration: time.Duration(v.Num().Int64()) * time.Millisecond}
	}
	return nil
}

func (p *parser) oauth(n *node, in string) *v1alpha1.OAuthClient {
	if !p.expectKind(n, kindObject, "\"oauth\""+in) {
		return nil
	}
	in = " in \"oauth\"" + in
	o := &v1alpha1.OAuthClient{}
	for _, m := range n.members {
		switch m.key {
		case "clientId":
			o.ClientID = p.plainString(m, in)
		case "callbackPort":
			o.CallbackPort = p.port(m, in)
		case "authServerMetadataUrl":
			o.AuthServerMetadataURL = p.metadataURL(m, in)
		case "scopes":
			o.Scopes = p.scopes(m, in)
		case "resource":
			o.Resource = p.resource(m, in)
		case "audience":
			o.Audience = p.plainString(m, in)
		case "authorizeParams":
			o.AuthorizeParams = p.authorizeParams(m, in)
		case "tokenEndpointAuthMethod":
			o.TokenEndpointAuthMethod = p.oneOf(m, in, tokenAuthMethods)
		case "grant":
			o.Grant = v1alpha1.OAuthGrant(p.oneOf(m, in, oauthGrants))
		default:
			p.unknownKey(m, in, oauthKeys)
		}
	}
	return o
}

var (
	tokenAuthMethods = []string{"client_secret_basic", "client_secret_post", "private_key_jwt", "none"}
	oauthGrants      = []string{string(v1alpha1.OAuthGrantAuthorizationCode), string(v1alpha1.OAuthGrantClientCredentials)}
)

// resource reads an RFC 8707 resource: an absolute URI without a fragment.
func (p *parser) resource(m member, in string) string {
	raw := p.plainString(m, in)
	if len(raw) > v1alpha1.MaxURLLength {
		p.errorf(m.value.at, "%q%s is %d bytes long; the limit is %d", m.key, in, len(raw), v1alpha1.MaxURLLength)
		return raw
	}
	if u, err := url.Parse(raw); raw != "" && (err != nil || !u.IsAbs() || u.Fragment != "") {
		p.errorf(m.value.at, "%q%s must be an absolute URI without a fragment (RFC 8707)", m.key, in)
	}
	return raw
}

// maxAuthorizeParams is the most extra authorization parameters (the CRD's MaxItems).
const maxAuthorizeParams = 16

// oneOf reads a string that must be one of values.
func (p *parser) oneOf(m member, in string, values []string) string {
	v := p.plainString(m, in)
	if v != "" && !slices.Contains(values, v) {
		p.errorf(m.value.at, "%q%s must be one of %s, not %q", m.key, in, strings.Join(values, ", "), v)
	}
	return v
}

// authorizeParams reads an object of string values, sorted by name. The parameters the flow
// sets itself cannot be replaced: they carry its security (PKCE, state, redirect, client).
func (p *parser) authorizeParams(m member, in string) []v1alpha1.NameValue {
	what := fmt.Sprintf("%q%s", m.key, in)
	if !p.expectKind(m.value, kindObject, what) {
		return nil
	}
	if len(m.value.members) > maxAuthorizeParams {
		p.errorf(m.value.at, "%s has %d entries; the limit is %d", what, len(m.value.members), maxAuthorizeParams)
	}
	var out []v1alpha1.NameValue
	for _, f := range m.value.members {
		if slices.Contains(flowParams, f.key) {
			p.errorf(f.keyAt, "%q in %s is set by the sign-in itself", f.key, what)
			continue
		}
		out = append(out, v1alpha1.NameValue{Name: f.key, Value: p.plainString(f, " in "+what)})
	}
	slices.SortFunc(out, func(a, b v1alpha1.NameValue) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// flowParams are the authorization request's parameters the sign-in sets.
var flowParams = []string{"response_type", "client_id", "redirect_uri", "state", "code_challenge", "code_challenge_method", "scope", "resource"}

func (p *parser) port(m member, in string) int32 {
	what := fmt.Sprintf("%q%s", m.key, in)
	if !p.expectKind(m.value, kindNumber, what) {
		return 0
	}
	v, ok := new(big.Rat).SetString(m.value.str)
	if !ok || !v.IsInt() || v.Sign() <= 0 || v.Cmp(big.NewRat(65535, 1)) > 0 {
		p.errorf(m.value.at, "%s must be a port, 1 to 65535, not %s", what, m.value.str)
		return 0
	}
	return int32(v.Num().Int64())
}

func (p *parser) metadataURL(m member, in string) string {
	raw := p.plainString(m, in)
	if len(raw) > v1alpha1.MaxURLLength {
		p.errorf(m.value.at, "%q%s is %d bytes long; the limit is %d", m.key, in, len(raw), v1alpha1.MaxURLLength)
		return raw
	}
	if raw == "" || strings.Contains(raw, "${") {
		return raw
	}
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		p.errorf(m.value.at, "%q%s must be an absolute http(s) URL", m.key, in)
	}
	return raw
}

// scopes reads Claude Code's scopes: one string of space-separated scopes, or a list; at most
// maxSandboxItems of at most maxScopeLength bytes each, as the CRD admits.
func (p *parser) scopes(m member, in string) []string {
	what := fmt.Sprintf("%q%s", m.key, in)
	var scopes []string
	if m.value.kind == kindString {
		p.checkValue(m.value, what, v1alpha1.MaxArgLength)
		scopes = strings.Fields(m.value.str)
		if len(scopes) > maxSandboxItems {
			p.errorf(m.value.at, "%s has %d scopes; the limit is %d", what, len(scopes), maxSandboxItems)
		}
	} else {
		scopes = p.stringList(m, in, maxSandboxItems, true)
	}
	for _, s := range scopes {
		if len(s) > maxScopeLength {
			p.errorf(m.value.at, "%s has a scope of %d bytes; the limit is %d", what, len(s), maxScopeLength)
			break
		}
	}
	return scopes
}

// maxScopeLength is the longest OAuth scope (the CRD's items:MaxLength).
const maxScopeLength = 256

// sandbox reads VS Code's "sandboxEnabled" and "sandbox" of a stdio server.
func (p *parser) sandbox(fields map[string]member, in string) *v1alpha1.Sandbox {
	enabled, hasEnabled := fields["sandboxEnabled"]
	body, hasBody := fields["sandbox"]
	if !hasEnabled && !hasBody {
		return nil
	}
	sb := &v1alpha1.Sandbox{}
	if hasEnabled && p.expectKind(enabled.value, kindBool, fmt.Sprintf("\"sandboxEnabled\"%s", in)) {
		sb.Enabled = enabled.value.boolean
	}
	if hasBody && body.value.kind == kindBool {
		sb.Disabled = !body.value.boolean // "sandbox": false opts the server out
		return sb
	}
	if !hasBody || !p.expectKind(body.value, kindObject, fmt.Sprintf("\"sandbox\"%s", in)) {
		return sb
	}
	for _, m := range body.value.members {
		where := fmt.Sprintf(" in \"sandbox.%s\"%s", m.key, in)
		switch m.key {
		case "filesystem":
			sb.Filesystem = &v1alpha1.SandboxFilesystem{}
			p.lists(m, where, filesystemKeys, map[string]*[]string{
				"allowWrite": &sb.Filesystem.AllowWrite, "denyRead": &sb.Filesystem.DenyRead, "denyWrite": &sb.Filesystem.DenyWrite,
			})
		case "network":
			sb.Network = &v1alpha1.SandboxNetwork{}
			p.lists(m, where, networkKeys, map[string]*[]string{
				"allowedDomains": &sb.Network.AllowedDomains, "deniedDomains": &sb.Network.DeniedDomains,
			})
		default:
			p.unknownKey(m, " in \"sandbox\""+in, sandboxKeys)
		}
	}
	return sb
}

// lists reads an object of string lists into the targets named by their keys.
func (p *parser) lists(m member, in string, known []string, into map[string]*[]string) {
	if !p.expectKind(m.value, kindObject, fmt.Sprintf("%q%s", m.key, in)) {
		return
	}
	for _, f := range m.value.members {
		target, ok := into[f.key]
		if !ok {
			p.unknownKey(f, in, known)
			continue
		}
		*target = p.stringList(f, in, maxSandboxItems, true)
	}
}

// Unacted says, one line per server and key, what a spec carries from a client's entry that
// the controller does not act on yet, so the user learns it where the file's state is shown
// (the mirror's ConfigSynced condition, dev's terminal) rather than from a server that fails.
func Unacted(spec *v1alpha1.ProjectMCPSpec) []string {
	var out []string
	for _, s := range spec.Servers {
		switch sb := s.Sandbox; {
		case sb == nil:
		case sb.Disabled:
			out = append(out, fmt.Sprintf("server %q: \"sandbox\": false runs it outside the controller's sandbox, where it may read what the other servers' user can", s.Name))
		}
	}
	return out
}
