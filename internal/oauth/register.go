package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Registration is a client registered with an authorization server by RFC 7591.
type Registration struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	AuthMethod   string `json:"token_endpoint_auth_method"`
}

// Register registers a client for grant with the authorization server's registration
// endpoint: a public client (no secret) for the authorization code, whose refresh token grant
// is asked for too, or a confidential one for client credentials.
func Register(ctx context.Context, hc *http.Client, meta ServerMetadata, grant, redirectURI string, scopes []string) (*Registration, error) {
	if meta.RegistrationEndpoint == "" {
		return nil, errors.New("the authorization server offers no dynamic client registration: give the server's oauth a clientId registered with it")
	}
	doc := map[string]any{"client_name": "projectmcp", "token_endpoint_auth_method": AuthNone}
	if grant == GrantClientCredentials {
		doc["grant_types"] = []string{GrantClientCredentials}
		doc["token_endpoint_auth_method"] = AuthSecretBasic
	} else {
		doc["grant_types"] = []string{GrantAuthorizationCode, grantRefreshToken}
		doc["response_types"] = []string{"code"}
		doc["redirect_uris"] = []string{redirectURI}
	}
	if len(scopes) > 0 {
		doc["scope"] = joinScopes(scopes)
	}
	body, _ := json.Marshal(doc)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, meta.RegistrationEndpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("registering the client: %w", err)
	}
	defer drain(resp)
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes))
	if err != nil {
		return nil, fmt.Errorf("registering the client: %w", err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("registering the client: the authorization server answered HTTP %d", resp.StatusCode)
	}
	var reg Registration
	if err := json.Unmarshal(data, &reg); err != nil || reg.ClientID == "" {
		return nil, errors.New("registering the client: the answer names no client_id")
	}
	if reg.AuthMethod == "" {
		reg.AuthMethod = AuthMethodFor("", reg.ClientSecret, meta.TokenEndpointAuthMethodsSupported)
	}
	return &reg, nil
}
