//! The Envoy-facing doors: the rate limit service ([`grpc`]) and its HTTP form `POST /json`
//! ([`grpc::json`]), health as envoyproxy/ratelimit reports it, and its opt-in debug port. What
//! an Envoy request means is not decided here but by the planner
//! ([`tollgate_config::envoy_plan`]), which explain uses too.

pub(crate) mod debug;
pub mod grpc;
pub(crate) mod health;
