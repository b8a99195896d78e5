// The tests' OpenID provider: node-oidc-provider (a certified OpenID Connect implementation),
// configured as a facility's identity provider would be for the gateway. Started by
// tests/support/openid_provider.py, which reads the first line printed ("ready <issuer>").
//
// Settings from the environment:
//   OP_PORT      the port on 127.0.0.1 (the issuer is http://127.0.0.1:OP_PORT)
//   OP_REDIRECT  the gateway's sign-in callback, the console client's only redirect URI
//   OP_AUDIENCE  the gateway's audience: access tokens are JWTs for it (RFC 8707 resource)
//
// Clients: `iri-console` (confidential, PKCE required, access tokens of 10 minutes) and
// `iri-console-brief` (the same, but access tokens of 3 seconds: the expiry test); and
// `iri-gateway`, the gateway as a resource server asking the introspection endpoint. A token
// for another audience is had by asking for the resource `urn:example:other-service`.
// Opaque access tokens (only the provider can read them: introspection, revocation) are made
// for the resources `urn:example:opaque-api` and `urn:example:opaque-other`.
// Users sign in on the provider's own login page (its development interactions: any password);
// their claims come from ACCOUNTS. Consent is given once for all (a facility's own client).
import { generateKeyPair, exportJWK } from "jose";
import Provider from "oidc-provider";

const port = Number(process.env.OP_PORT);
const redirect = process.env.OP_REDIRECT;
const audience = process.env.OP_AUDIENCE;
if (!port || !redirect || !audience) {
  console.error("OP_PORT, OP_REDIRECT and OP_AUDIENCE are required");
  process.exit(2);
}
const OTHER = "urn:example:other-service";
const OPAQUE = ["urn:example:opaque-api", "urn:example:opaque-other"];
const issuer = `http://127.0.0.1:${port}`;

const ACCOUNTS = {
  alice: { groups: ["hpc-users", "proj-demo"], projects: ["demo"], email: "alice@example.org" },
  carol: { groups: ["hpc-users"], projects: [], email: "carol@example.org" },
};
const claimsOf = (id) => ({ sub: id, preferred_username: id, ...(ACCOUNTS[id] || {}) });

const { privateKey } = await generateKeyPair("RS256", { extractable: true });
const signing = { ...(await exportJWK(privateKey)), kid: "test-key", alg: "RS256", use: "sig" };

const client = (id, secret) => ({
  client_id: id,
  client_secret: secret,
  redirect_uris: [redirect],
  post_logout_redirect_uris: [new URL("/console/sign-in?signed-out=1", redirect).href],
  grant_types: ["authorization_code"],
  response_types: ["code"],
  token_endpoint_auth_method: "client_secret_basic",
});

const provider = new Provider(issuer, {
  clients: [
    client("iri-console", "console-secret"),
    client("iri-console-brief", "brief-secret"),
    {
      client_id: "iri-gateway",
      client_secret: "gateway-secret",
      redirect_uris: [],
      grant_types: [],
      response_types: [],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  jwks: { keys: [signing] },
  cookies: { keys: ["test-provider-cookie-key"] },
  pkce: { required: () => true },
  ttl: { Interaction: 600, Session: 3600, Grant: 3600, IdToken: 600, AuthorizationCode: 60 },
  scopes: ["openid", "profile", "email", "iri.write"],
  claims: { openid: ["sub"], profile: ["preferred_username", "groups", "projects"], email: ["email"] },
  findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => claimsOf(id) }),
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    rpInitiatedLogout: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => audience,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource, client) => {
        if (resource !== audience && resource !== OTHER && !OPAQUE.includes(resource)) {
          throw new Error("unknown resource");
        }
        return {
          scope: "iri.write",
          audience: resource,
          accessTokenFormat: OPAQUE.includes(resource) ? "opaque" : "jwt",
          accessTokenTTL: client.clientId === "iri-console-brief" ? 3 : 600,
          jwt: { sign: { alg: "RS256" } },
        };
      },
    },
  },
  extraTokenClaims: async (_ctx, token) => {
    const { groups, projects, preferred_username } = claimsOf(token.accountId);
    return { groups, projects, preferred_username };
  },
  loadExistingGrant: async (ctx) => {
    const known = ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (known) {
      const found = await ctx.oidc.provider.Grant.find(known);
      if (found) return found;
    }
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope("openid profile email iri.write");
    grant.addOIDCClaims(["preferred_username", "groups", "projects", "email"]);
    grant.addResourceScope(audience, "iri.write");
    for (const resource of [OTHER, ...OPAQUE]) grant.addResourceScope(resource, "iri.write");
    await grant.save();
    return grant;
  },
});
provider.proxy = false;
provider.listen(port, "127.0.0.1", () => console.log(`ready ${issuer}`));
