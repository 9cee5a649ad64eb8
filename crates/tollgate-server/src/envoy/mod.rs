//! The Envoy-facing doors that are not the rate limit service itself: health as
//! envoyproxy/ratelimit reports it, and its opt-in debug port. The rate limit service and its
//! `/json` door live in [`crate::grpc`].

pub(crate) mod debug;
pub(crate) mod health;
