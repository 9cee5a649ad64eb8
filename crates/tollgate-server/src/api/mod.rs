//! The HTTP/JSON API: what a NestJS, Spring or any other service calls to ask for a decision.
//!
//! | route | does |
//! |---|---|
//! | `POST /v1/check` `{"policy", "key", "cost"?}` | decide and record: 200 allowed, 429 denied |
//! | `POST /v1/check` `{"rules": [{"policy", "key", "cost"?}, ...]}` | the same for several policies at once, all or nothing |
//! | `GET /v1/limits/{policy}/{key}?cost=N` | the same answer, recording nothing (peek) |
//! | `POST /v1/refund` `{"policy", "key", "cost"?}` | give back what an admitted request spent (it failed on the caller's side) |
//! | `DELETE /v1/limits/{policy}/{key}` | forget the key's state (admin) |
//! | `GET /v1/explain?policy&key&cost` or `?domain&descriptor=k=v,...` (or `POST` with JSON) | what a check would decide and why, spending nothing (see [`explain`]) |
//! | `POST /v1/concurrency/{policy}/{key}/acquire` | take a lease of a concurrency policy: 200 with its id, 429 when full (see [`concurrency`]) |
//! | `POST /v1/concurrency/{policy}/{key}/release` `{"lease_id"}` | give the lease back |
//! | `DELETE /v1/concurrency/{policy}/{key}` | drop every lease of the key (admin) |
//! | `POST /v1/attempts/{purpose}/{key}` `{"ttl_seconds"}` | count a failed attempt |
//! | `GET /v1/attempts/{purpose}/{key}` | the count and its TTL |
//! | `GET /v1/attempts/{purpose}/{key}/check?max=N` | whether another attempt is allowed |
//! | `DELETE /v1/attempts/{purpose}/{key}` | clear the counter (after a success; admin) |
//! | `GET, POST, DELETE /v1/admin/access` | allow and deny list entries, listed a page at a time (admin; see [`admin`]) |
//! | `GET /v1/admin/top-offenders?policy=&n=` | the most denied keys per policy (admin) |
//! | `GET /v1/overrides/{policy}?limit=&cursor=` | the policy's runtime overrides, a page at a time (admin; see [`overrides`]) |
//! | `PUT`/`GET`/`DELETE /v1/overrides/{policy}/keys/{key}` | set, read, remove one key's override (admin) |
//! | `PUT`/`GET`/`DELETE /v1/overrides/{policy}/prefixes/{prefix}` | the same for every key under a prefix (admin) |
//! | `GET /metrics`, `/healthz`, `/readyz` | Prometheus, liveness, readiness (with the store's health, naming the failure class) |
//! | `GET /openapi.json` | this API as an OpenAPI 3.1 document (see [`openapi`]) |
//!
//! The dashboard (`/dashboard`, its data at `/dashboard/data` behind the same admin token) is
//! served beside these routes; see [`dashboard`].
//!
//! Every decision is the [`Engine`](tollgate::Engine)'s: a request becomes a
//! [`Request`](tollgate::Request) of rules (a policy marked `shadow` gives a shadow rule) and one
//! [`Engine::run`](tollgate::Engine::run) decides it, failure modes included. This module only
//! translates.
//!
//! # One rule or several
//!
//! `{"policy", "key", "cost"?}` answers with the decision:
//! `{"allowed", "limit", "remaining", "reset_after_ms", "retry_after_ms", "degraded"}`.
//!
//! `{"rules": [...]}` (1 to [`MAX_RULES`](rules::MAX_RULES) rules) decides every rule together: if any enforced
//! rule denies, the answer is 429 and no rule spends anything (only the `block_for` penalties of
//! the rules that denied start); rules that name the same policy and key spend from one budget.
//! The body is `{"allowed", "degraded", "retry_after_ms", "rules": [...]}` with, for each rule in
//! request order, `{"policy", "outcome", "allowed", "shadow", "limit", "remaining",
//! "reset_after_ms", "retry_after_ms", "degraded"}`; `outcome` is `allowed`, `shadow_denied`,
//! `degraded` or `denied`, and a rule that would have allowed a denied request reports its
//! budget as it stands.
//!
//! Decisions carry the IETF `RateLimit-Policy` and `RateLimit` headers (one entry per enforced
//! rule of a list), and `Retry-After` (whole seconds, rounded up) when denied, from the rule that
//! makes the client wait longest.
//!
//! # Errors
//!
//! Every error is an RFC 9457 problem (`application/problem+json`) with the status, its reason
//! as `title`, and a `detail` that names the problem (``rules[2]: unknown policy `x` ``): 400 for
//! unusable input, 403 for a key on a deny list (type `urn:tollgate:problem:blocked`, with
//! `"reason": "blocked"` and the `policy`), 404 for an unknown policy or route, 405 for a method a route does not take,
//! 408 for a body that did not arrive in time, 413 for a body over the limit ([`MAX_BODY`](crate::runtime::listener::MAX_BODY) by
//! default), 414 and 431 for an oversized target or header section, 401 for a missing admin
//! token, and 503 when the store failed and a rule's policy fails closed
//! (`on_store_failure: fail_closed`), with `Retry-After`. Bodies are parsed here rather than by
//! an extractor so that malformed JSON, a missing field and an oversized body all get that shape.
//!
//! # Layout
//!
//! One file per feature, each with its routes' handlers and the types they read and answer
//! (from which the OpenAPI document is derived); features do not import each other. What they
//! share has a small module of its own: [`router`](mod@router) (the route table), [`error`] (`ApiError`),
//! [`body`] (reading JSON bodies), [`auth`] (the admin token), [`page`] (`?limit=&cursor=` of the
//! list routes), [`policy`] (finding the policy a route names), [`rules`] (the request bodies
//! that name rules) and [`answer`] (a verdict as JSON and headers).

pub(crate) mod admin;
pub(crate) mod answer;
pub(crate) mod attempts;
pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod charge;
pub(crate) mod check;
pub(crate) mod concurrency;
pub(crate) mod dashboard;
pub(crate) mod error;
pub mod explain;
pub(crate) mod limits;
pub(crate) mod openapi;
pub(crate) mod operations;
pub(crate) mod override_view;
pub(crate) mod overrides;
pub(crate) mod page;
pub(crate) mod policy;
pub(crate) mod router;
pub(crate) mod rules;

pub use router::router;
