// A real OpenID Provider for the browser tests: panva's certified `oidc-provider`, on
// loopback, with one confidential client (Gantry) and five people in different groups.
// Its login form is the library's own (dev interactions: any password). Consent is skipped,
// as corporate IdPs do for first-party apps.
//
// One test switch, GET /__test/tamper-audience?on=1|0: the token endpoint then answers with
// an ID token re-signed by the provider's own key but for another audience — a provider
// misbehaving on purpose, so the test can show Gantry refuses it.
import Provider from "oidc-provider";
import * as jose from "jose";

const port = Number(process.env.OIDC_PORT ?? 3103);
const gantry = process.env.GANTRY_URL ?? "http://127.0.0.1:3102";
const issuer = `http://127.0.0.1:${port}`;

export const accounts = {
  nina: { name: "Nina Kowalski", email: "nina@example.com", groups: ["ml-nlp"] },
  leo: { name: "Leo Brandt", email: "leo@example.com", groups: ["ml-nlp", "ml-nlp-leads"] },
  ada: { name: "Ada Okafor", email: "ada@example.com", groups: ["ml-platform-admins", "staff"] },
  zed: { name: "Zed Quinn", email: "zed@example.com", groups: ["marketing"] },
  omar: { name: "Omar Haddad", email: "omar@example.com", groups: ["ml-nlp"] },
};

const { privateKey } = await jose.generateKeyPair("RS256", { extractable: true });
const kid = "e2e-signing-key";
const jwk = { ...(await jose.exportJWK(privateKey)), kid, alg: "RS256", use: "sig" };

let tamperAudience = false;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: "gantry",
      client_secret: "gantry-e2e-secret",
      redirect_uris: [`${gantry}/auth/callback`],
      post_logout_redirect_uris: [`${gantry}/login`],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    },
  ],
  jwks: { keys: [jwk] },
  pkce: { required: () => true },
  scopes: ["openid", "profile", "email", "groups"],
  claims: {
    openid: ["sub"],
    profile: ["name", "preferred_username"],
    email: ["email", "email_verified"],
    groups: ["groups"],
  },
  // Put the scopes' claims in the ID token (Keycloak's and Dex's default), not only userinfo.
  conformIdTokenClaims: false,
  async findAccount(ctx, id) {
    const a = accounts[id];
    if (!a) return undefined;
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, email_verified: true, ...a };
      },
    };
  },
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId
      || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({
      clientId: ctx.oidc.client.clientId,
      accountId: ctx.oidc.session.accountId,
    });
    grant.addOIDCScope("openid profile email groups");
    await grant.save();
    return grant;
  },
  features: {
    devInteractions: { enabled: true },
    rpInitiatedLogout: { enabled: true },
  },
  cookies: { keys: ["e2e-only-cookie-key"] },
});

provider.use(async (ctx, next) => {
  if (ctx.path === "/__test/tamper-audience") {
    tamperAudience = ctx.query.on === "1";
    ctx.body = { tamperAudience };
    return;
  }
  await next();
  if (tamperAudience && ctx.path === "/token" && ctx.body?.id_token) {
    const claims = jose.decodeJwt(ctx.body.id_token);
    ctx.body.id_token = await new jose.SignJWT({ ...claims, aud: "someone-else" })
      .setProtectedHeader({ alg: "RS256", kid })
      .sign(privateKey);
  }
});

provider.listen(port, "127.0.0.1", () => {
  console.log(`oidc-provider listening on ${issuer}`);
});
