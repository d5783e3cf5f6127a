"""Connected accounts: when a tool needs the user's third-party account, a URL-mode question links to a hosted
authorization page; the credential lands in an encrypted vault and never reaches the handler, the client, the
model, the logs, the audit trail or `requestState`.

- `status`: the account statuses and every allowed transition, in one table (no I/O).
- `vault`: credentials encrypted at rest (AES-256-GCM, the account id bound as associated data), with its own key
  ring and rotation.
- `connections`: what a connection is (OAuth 2.0 authorization code with PKCE, or an API key), presets, discovery.
"""
