"""Approvals: a write waits until someone else, allowed to, approves this exact call on a signed-in page.

- `askback.core.approving`: the `Approval` a tool declares, the digest of one exact call, and the port the core asks;
- `policy`: who may decide a request and what the decisions so far add up to (pure);
- `service`: requests, decisions, withdrawals, expiry and consumption in the app's store, with their audit rows and
  events written in the same transaction as the change (`records`: the values it speaks in; `repository`: its
  statements; `schema`: its tables' own migration history);
- `events`: the catalogue of approval events, and a subscription to them on every instance;
- `pages`: the approvers' list and request pages, and the requester's status page, for people signed in;
- `setup`: `ApprovalsSetup`, the extension that wires them into an app.
"""
