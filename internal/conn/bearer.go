package conn

import (
	"context"
	"io"
	"net/http"
)

// Bearer is the OAuth credential of a remote server, kept by the controller (oauth.Keeper):
// every request carries its access token in Authorization, which wins over a configured
// header of that name. A request the server answers 401 is sent once more with the token
// Refused returns (a 401 means the request was not served, so sending it again is safe), and
// a second 401 goes to the caller as before.
type Bearer interface {
	// Token is the access token to send now.
	Token(ctx context.Context) (string, error)
	// Refused reports that the server refused token and returns the one to send instead.
	Refused(ctx context.Context, token string) (string, error)
}

// bearerTransport puts the server's bearer token on every request through it, and sends a
// request the server refuses with 401 once more with the token the refusal brings. A request
// whose body cannot be read again is not sent again.
type bearerTransport struct {
	base   http.RoundTripper
	bearer Bearer
}

func (t bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := t.bearer.Token(req.Context())
	if err != nil {
		return nil, err
	}
	resp, err := t.base.RoundTrip(withBearer(req, tok))
	if err != nil || resp.StatusCode != http.StatusUnauthorized || (req.Body != nil && req.GetBody == nil) {
		return resp, err
	}
	discard(resp)
	if tok, err = t.bearer.Refused(req.Context(), tok); err != nil {
		return nil, err
	}
	again := withBearer(req, tok)
	if req.GetBody != nil {
		if again.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	return t.base.RoundTrip(again)
}

// withBearer is a copy of req carrying token.
func withBearer(req *http.Request, token string) *http.Request {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// sendBearer sends one request on the carrier with the server's bearer token (none when b is
// nil), and once more, made anew by remake, with the token a 401 brings.
func sendBearer(b Bearer, req *http.Request, send func(*http.Request) (*http.Response, error), remake func() (*http.Request, error)) (*http.Response, error) {
	if b == nil {
		return send(req)
	}
	tok, err := b.Token(req.Context())
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := send(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	discard(resp)
	if tok, err = b.Refused(req.Context(), tok); err != nil {
		return nil, err
	}
	if req, err = remake(); err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return send(req)
}

// discard reads a little of an answer not used, so its connection is reused, and closes it.
func discard(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
	resp.Body.Close()
}
