package main

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// secretish matches the names (of env variables, headers, flags, query parameters) whose
// values are usually secrets.
var secretish = regexp.MustCompile(`(?i)token|secret|password|passwd|key|auth|cookie|credential`)

// tokenShaped matches values that are credentials by their shape whatever they are named:
// the prefixes of well-known issuers' tokens, and an Authorization header's schemes.
var tokenShaped = regexp.MustCompile(`^(ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abpr]-|sk-|sk_live_|rk_live_|AKIA[0-9A-Z]{12}|AIza)|^(?i:bearer|basic)\s+\S`)

// isLiteral is whether a value is written as it is, with no ${VAR} reference in it.
func isLiteral(v string) bool { return v != "" && !strings.Contains(v, "${") }

// literalSecrets names, never quoting a value, where a server holds a value that looks like a
// credential written literally: an env variable or header of a secret-sounding name, an
// argument (--api-key=..., --token VALUE, or a token's shape), a URL's password or a query
// parameter of a secret-sounding name.
func literalSecrets(s v1alpha1.MCPServer) []string {
	var found []string
	if s.Stdio != nil {
		found = append(found, secretValues("env", s.Stdio.Env)...)
		found = append(found, secretArgs(s.Stdio.Args)...)
	}
	if s.HTTP != nil {
		found = append(found, secretValues("headers", s.HTTP.Headers)...)
		found = append(found, secretURL(s.HTTP.URL)...)
	}
	return found
}

func secretValues(what string, vars []v1alpha1.NameValue) []string {
	var found []string
	for _, nv := range vars {
		if isLiteral(nv.Value) && (secretish.MatchString(nv.Name) || tokenShaped.MatchString(nv.Value)) {
			found = append(found, fmt.Sprintf("%s.%s", what, nv.Name))
		}
	}
	return found
}

func secretArgs(args []string) []string {
	var found []string
	for i, a := range args {
		flag, value, hasValue := strings.Cut(a, "=")
		isFlag := strings.HasPrefix(flag, "-")
		switch {
		case !isLiteral(a):
		case tokenShaped.MatchString(a) || (hasValue && tokenShaped.MatchString(value)):
			found = append(found, fmt.Sprintf("args[%d]", i))
		case isFlag && hasValue && secretish.MatchString(flag) && isLiteral(value):
			found = append(found, fmt.Sprintf("args[%d] (%s)", i, flag))
		case isFlag && !hasValue && secretish.MatchString(flag) && i+1 < len(args) &&
			isLiteral(args[i+1]) && !strings.HasPrefix(args[i+1], "-"):
			found = append(found, fmt.Sprintf("args[%d] (after %s)", i+1, flag))
		}
	}
	return found
}

func secretURL(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var found []string
	if p, ok := u.User.Password(); ok && isLiteral(p) {
		found = append(found, "the url's password")
	}
	for name, values := range u.Query() {
		for _, v := range values {
			if isLiteral(v) && (secretish.MatchString(name) || tokenShaped.MatchString(v)) {
				found = append(found, fmt.Sprintf("the url's query parameter %s", name))
				break
			}
		}
	}
	return found
}
