package oauth

import "github.com/dsh-dev/projectmcp/api/v1alpha1"

// SettingsOf are the settings a server's oauth carries (nil: none, an authorization code
// grant discovered from the URL alone).
func SettingsOf(o *v1alpha1.OAuthClient) Settings {
	if o == nil {
		return Settings{Grant: GrantAuthorizationCode}
	}
	s := Settings{ClientID: o.ClientID, CallbackPort: int(o.CallbackPort), AuthServerMetadataURL: o.AuthServerMetadataURL,
		Scopes: o.Scopes, Resource: o.Resource, Audience: o.Audience, TokenAuthMethod: o.TokenEndpointAuthMethod,
		Grant: GrantAuthorizationCode}
	if o.Grant == v1alpha1.OAuthGrantClientCredentials {
		s.Grant = GrantClientCredentials
	}
	if len(o.AuthorizeParams) > 0 {
		s.AuthorizeParams = map[string]string{}
		for _, kv := range o.AuthorizeParams {
			s.AuthorizeParams[kv.Name] = kv.Value
		}
	}
	return s
}
