// Discovers where to sign in for an MCP endpoint as the npm SDK's OAuth client does: a request
// without a token, the 401's WWW-Authenticate challenge, the protected-resource metadata
// (RFC 9728) it points at and the one at the well-known location, then the first authorization
// server's OpenID configuration. Prints what it found as JSON.
import {
  discoverOAuthProtectedResourceMetadata,
  extractWWWAuthenticateParams,
} from "@modelcontextprotocol/sdk/client/auth.js";

const endpoint = process.argv[2];
const res = await fetch(endpoint, {
  method: "POST",
  headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
});
await res.body?.cancel();
const challenge = extractWWWAuthenticateParams(res);
const fromChallenge = await discoverOAuthProtectedResourceMetadata(endpoint, {
  resourceMetadataUrl: challenge.resourceMetadataUrl,
});
const wellKnown = await discoverOAuthProtectedResourceMetadata(endpoint);
const issuer = fromChallenge.authorization_servers?.[0];
let openid = null;
if (issuer) {
  const r = await fetch(new URL(".well-known/openid-configuration", issuer.endsWith("/") ? issuer : issuer + "/"));
  openid = r.ok ? await r.json() : { status: r.status };
}
console.log(JSON.stringify({
  status: res.status,
  resourceMetadataUrl: challenge.resourceMetadataUrl?.href ?? null,
  fromChallenge,
  wellKnown,
  openid,
}));
