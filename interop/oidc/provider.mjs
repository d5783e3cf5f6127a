// A real OAuth 2.0 / OpenID Connect authorization server for askback's connected-accounts tests: panva's
// oidc-provider (pinned in interop/package.json), in memory, on loopback, with development login pages.
//
//   node interop/oidc/provider.mjs [--port N] [--config JSON]
//
// The configuration is one JSON object, from --config or the OIDC_PROVIDER_CONFIG environment variable (the
// argument wins); --port, then OIDC_PROVIDER_PORT, then config.port name the port (0, the default, takes any free
// one). Every field is optional:
//
//   {
//     "port": 0,
//     "accessTokenTtl": 60,          // seconds; tests may use 1 or 2 to see tokens expire
//     "refreshTokenTtl": 86400,      // seconds
//     "scopes": ["openid", "offline_access", "read", "write"],
//     "clients": [{                  // oidc-provider client metadata, passed through (defaults shown)
//       "client_id": "askback-test",
//       "client_secret": "askback-test-secret",
//       "redirect_uris": [],         // set them: an authorization request must name one exactly
//       "grant_types": ["authorization_code", "refresh_token"],
//       "response_types": ["code"],
//       "token_endpoint_auth_method": "client_secret_basic"
//     }],
//     "resources": {                 // RFC 8707 resource indicators; absent: none is accepted
//       "http://127.0.0.1:8000/mcp": {"scope": "read deploy", "audience": "..."}
//     },
//     "clientCredentials": false,    // true: the client_credentials grant (give a client that grant type)
//     "registration": false,         // true: open dynamic client registration (RFC 7591) at /reg
//     "jwks": {"keys": [...]},       // private JWKs to sign with (an RSA key among them); default: the dev key
//     "accounts": {                  // more claims of some accounts, by account id (the login name)
//       "erin": {"groups": ["sre"]}  // any claim name and JSON value: {"roles": "x"} for ASKBACK_SIGNIN_GROUPS_CLAIM=roles
//     }
//   }
//
// Accounts: every login name is an account whose claims are only `sub`; an account listed in `accounts` has its
// claims too, in the ID token (and at userinfo) of every sign-in with scope `openid`. To put them in the ID token,
// oidc-provider's `conformIdTokenClaims` is turned off when `accounts` is given (by default it keeps the claims a
// scope grants out of an ID token that comes with an access token, as OpenID Connect Core 5.4 suggests); this is
// the provider-side setting an identity provider needs for askback's groups claim: the claim in the ID token.
//
// Resources: a token asked for a listed resource (`resource=` at /auth or /token) is a JWT access token (RFC 9068:
// header typ at+jwt, signed RS256 with the first RSA key of `jwks`, claims iss, sub, aud, client_id, scope, iat,
// exp, jti), its `aud` the resource URL or the given `audience`, for at most the listed scope. A request naming no
// resource gets the first listed one; the authorization code's granted resource is used at /token. For
// client_credentials, `sub` is the client_id. Restarting the provider with another `jwks` rotates the keys: the old
// kid is no longer published at /jwks.
//
// The issuer is http://127.0.0.1:<port>. When the server is ready it prints one line to stdout,
// `listening http://127.0.0.1:<port>`; oidc-provider's development warnings go to stderr.
//
// What the tests can rely on:
// - Discovery at /.well-known/openid-configuration: authorization /auth, token /token, revocation
//   /token/revocation (RFC 7009), introspection /token/introspection; code_challenge_methods_supported ["S256"].
// - PKCE S256 is required for every client, confidential ones too (oidc-provider requires it by default only for
//   public clients): an authorization request without code_challenge is refused with invalid_request, and `plain`
//   is not supported.
// - A refresh token is issued when the client may use refresh_token and the granted scope includes
//   `offline_access`. oidc-provider keeps `offline_access` in an authorization request only together with
//   `prompt=consent` (OpenID Connect Core 11), so ask for `scope=openid offline_access` and `prompt=consent`.
// - Refresh tokens rotate on every use (also for confidential clients, where oidc-provider's default rotates only
//   late in a token's life). Reuse detection stays on: presenting a refresh token that was already used gets
//   invalid_grant ("refresh token already used") and revokes the whole grant, so its successor dies too.
// - Revoking a refresh token (POST /token/revocation, token_type_hint=refresh_token) revokes its grant; a refresh
//   with it then gets invalid_grant.
//
// Development login (oidc-provider's built-in devInteractions, lib/actions/interaction.js and lib/views/*.js). The
// authorization endpoint 303s to /interaction/<uid>, which shows one of two pages, each with one POST form to
// /interaction/<uid> and a "[ Cancel ]" link (/interaction/<uid>/abort: the redirect then carries
// error=access_denied):
// - Login, <title>Sign-in</title>, <h1>Sign-in</h1>: a hidden input name="prompt" value="login", a text input
//   name="login" (any value is accepted and becomes the account id, the token's `sub`), a password input
//   name="password" (required by the form, never checked), and <button type="submit">Sign-in</button>.
// - Consent, <title>Sign-in</title>, <h1>Authorize</h1> (the title element is the same on both pages; the h1
//   differs): a list of what is asked for (scopes other than openid/offline_access, claims, and "the client is
//   asking to have offline access to this authorization" for offline_access), a hidden input name="prompt"
//   value="consent", and <button type="submit">Continue</button>.
// After Continue the browser is sent (303) to the redirect URI with code, state and iss. A form posted without its
// hidden prompt field gets 501 "not implemented". Browser selectors: login `input[name=login]`,
// `input[name=password]`, `button[type=submit]`; consent `button[type=submit]` (text "Continue").
//
// Counters, so tests can count what reaches the provider (in memory, per process):
// - GET /__counters -> {"token": {"authorization_code": n, "refresh_token": n, ...other grant types as seen},
//   "revocation": n, "refresh_token_reuse": n}: token-endpoint POSTs by their grant_type, successful or not;
//   revocation-endpoint POSTs; refreshes refused because the refresh token had already been used. When the
//   configuration names `resources` or `jwks`, also `"jwks": n`, the GET /jwks requests.
// - POST /__counters/reset -> 204, every count back to 0.

import http from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

const { values: args } = parseArgs({
  options: { port: { type: 'string' }, config: { type: 'string' } },
  strict: true,
});

function fail(message) {
  process.stderr.write(`provider.mjs: ${message}\n`);
  process.exit(2);
}

let config = {};
const rawConfig = args.config ?? process.env.OIDC_PROVIDER_CONFIG;
if (rawConfig) {
  try {
    config = JSON.parse(rawConfig);
  } catch (error) {
    fail(`the configuration is not JSON (${error.message}); pass one object with --config or OIDC_PROVIDER_CONFIG`);
  }
}

const port = Number(args.port ?? process.env.OIDC_PROVIDER_PORT ?? config.port ?? 0);
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`the port must be an integer in 0..65535, not ${port}`);
const accessTokenTtl = Number(config.accessTokenTtl ?? 60);
const refreshTokenTtl = Number(config.refreshTokenTtl ?? 86400);
for (const [name, value] of [['accessTokenTtl', accessTokenTtl], ['refreshTokenTtl', refreshTokenTtl]]) {
  if (!Number.isInteger(value) || value < 1) fail(`${name} must be a whole number of seconds >= 1, not ${value}`);
}

const clients = (config.clients ?? [{}]).map((client) => ({
  client_id: 'askback-test',
  client_secret: 'askback-test-secret',
  redirect_uris: [],
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: 'client_secret_basic',
  ...client,
}));

const countJwks = config.resources !== undefined || config.jwks !== undefined;
const emptyCounters = () => ({
  token: { authorization_code: 0, refresh_token: 0 },
  revocation: 0,
  refresh_token_reuse: 0,
  ...(countJwks && { jwks: 0 }),
});
let counters = emptyCounters();

const resources = config.resources ?? {};
if (resources === null || typeof resources !== 'object' || Array.isArray(resources)) {
  fail('resources must be an object from resource URL to {"scope": "...", "audience"?: "..."}');
}
for (const [url, info] of Object.entries(resources)) {
  if (typeof info?.scope !== 'string') fail(`resources[${url}].scope must be a space-separated string`);
}
const resourceUrls = Object.keys(resources);

const accounts = config.accounts ?? {};
if (accounts === null || typeof accounts !== 'object' || Array.isArray(accounts)) {
  fail('accounts must be an object from account id to {"claim": value, ...}');
}
for (const [id, claims] of Object.entries(accounts)) {
  if (claims === null || typeof claims !== 'object' || Array.isArray(claims) || 'sub' in claims) {
    fail(`accounts[${id}] must be an object of claims other than sub`);
  }
}
const accountClaims = [...new Set(Object.values(accounts).flatMap((claims) => Object.keys(claims)))];

// Listen first: the issuer must name the port, which is only known now when port 0 was asked for.
const server = http.createServer();
await new Promise((resolve, reject) => {
  server.once('error', reject);
  server.listen(port, '127.0.0.1', resolve);
});
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients,
  scopes: config.scopes ?? ['openid', 'offline_access', 'read', 'write'],
  pkce: { required: () => true },
  rotateRefreshToken: true,
  // oidc-provider's default rule, stated here because the tests depend on it.
  issueRefreshToken: async (ctx, client, code) =>
    client.grantTypeAllowed('refresh_token') && code.scopes.has('offline_access'),
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    clientCredentials: { enabled: config.clientCredentials === true },
    registration: { enabled: config.registration === true, initialAccessToken: false },
    ...(resourceUrls.length > 0 && {
      resourceIndicators: {
        enabled: true,
        defaultResource: async (ctx, client, oneOf) => oneOf ?? resourceUrls[0],
        useGrantedResource: async () => true,
        getResourceServerInfo: async (ctx, resourceIndicator) => {
          const info = resources[resourceIndicator];
          if (info === undefined) throw new errors.InvalidTarget();
          return {
            scope: info.scope,
            ...(info.audience !== undefined && { audience: info.audience }),
            accessTokenTTL: accessTokenTtl,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    }),
  },
  ...(config.jwks !== undefined && { jwks: config.jwks }),
  ttl: {
    AccessToken: accessTokenTtl,
    ClientCredentials: accessTokenTtl,
    AuthorizationCode: 60,
    IdToken: 3600,
    RefreshToken: refreshTokenTtl,
    Grant: refreshTokenTtl,
    Interaction: 600,
    Session: 3600,
  },
  ...(config.accounts !== undefined && {
    claims: { openid: ['sub', ...accountClaims] },
    conformIdTokenClaims: false,
  }),
  findAccount: async (ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ ...(Object.hasOwn(accounts, sub) ? accounts[sub] : {}), sub }),
  }),
  cookies: { keys: ['askback-oidc-test-cookie-key-0123456789'] },
});

provider.on('grant.error', (ctx, error) => {
  if (error.error === 'invalid_grant' && error.error_detail === 'refresh token already used') {
    counters.refresh_token_reuse += 1;
  }
});
provider.on('server_error', (ctx, error) => {
  process.stderr.write(`server_error: ${error.stack ?? error}\n`);
});

// Koa middleware added with use() runs before oidc-provider's own routes.
provider.use(async (ctx, next) => {
  if (ctx.path === '/__counters' && ctx.method === 'GET') {
    ctx.body = counters;
    return;
  }
  if (ctx.path === '/__counters/reset' && ctx.method === 'POST') {
    counters = emptyCounters();
    ctx.status = 204;
    return;
  }
  try {
    await next();
  } finally {
    // Counted after the route ran, since the route is what parses the form body; its errors are answered by
    // oidc-provider inside next(), so refused requests are counted too.
    if (ctx.method === 'GET' && ctx.path === '/jwks' && countJwks) {
      counters.jwks += 1;
    } else if (ctx.method === 'POST' && ctx.path === '/token') {
      const grantType = String(ctx.oidc?.body?.grant_type ?? '(none)');
      counters.token[grantType] = (counters.token[grantType] ?? 0) + 1;
    } else if (ctx.method === 'POST' && ctx.path === '/token/revocation') {
      counters.revocation += 1;
    }
  }
});

// oidc-provider checks client metadata only when a client is first used; check it now, so a bad configuration
// stops the start instead of failing the first authorization request.
for (const { client_id: clientId } of clients) {
  try {
    await provider.Client.find(clientId);
  } catch (error) {
    fail(`client ${clientId}: ${error.error_description ?? error.message}`);
  }
}

server.on('request', provider.callback());
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)).closeAllConnections());
}
process.stdout.write(`listening ${issuer}\n`);
