//! Who may do what: the admin and app tokens, checked once at start and compared here for every
//! door (the HTTP API, `POST /json`, the gRPC port), so no door compares tokens its own way.
//!
//! Three kinds of act: open ones (checks, peeks), *app* ones (what an application does for its
//! users: attempts, refunds, charges, lease release, and the Envoy doors' refunds and charges),
//! which take the app token or the admin token, and *admin* ones (resets, overrides, lists, top
//! offenders, the dashboard's data), which take the admin token only. With no token configured
//! everything is open, as before tokens existed; with any token configured, least privilege
//! holds: a server with only an app token has its admin acts closed to everyone, since no
//! credential exists that could open them.

use subtle::ConstantTimeEq;

/// Why an act was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A token would open it, and the caller gave none that does.
    NoToken,
    /// No token can open it: an admin act on a server without an admin token.
    Closed,
}

impl Refusal {
    /// The sentence a caller reads.
    pub(crate) fn message(self, act: Act) -> &'static str {
        match (self, act) {
            (Refusal::NoToken, Act::Admin) => "admin token required: Authorization: Bearer <token>",
            (Refusal::NoToken, Act::App) => "app or admin token required: Authorization: Bearer <token>",
            (Refusal::Closed, _) => {
                "admin routes are closed: this server has an app token but no admin token \
                 (start it with --admin-token to use them)"
            }
        }
    }
}

/// Who asks through a door that some acts need a token for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caller<'a> {
    /// The bearer token presented, `""` without one.
    Bearer(&'a str),
    /// A caller the door trusts whatever it presents: the library's own calls, or a gRPC port
    /// declared trusted.
    Trusted,
}

/// The two kinds of guarded act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    App,
    Admin,
}

/// The configured tokens, as [`Settings`](super::Settings) holds them.
pub(crate) struct Tokens<'a> {
    pub(crate) admin: Option<&'a str>,
    pub(crate) app: Option<&'a str>,
}

impl Tokens<'_> {
    /// Whether `caller` may do `act`.
    pub(crate) fn admit(&self, act: Act, caller: Caller<'_>) -> Result<(), Refusal> {
        match caller {
            Caller::Trusted => Ok(()),
            Caller::Bearer(given) => self.authorize(act, given),
        }
    }

    /// Whether `given` (the presented bearer token, `""` without one) may do `act`.
    pub(crate) fn authorize(&self, act: Act, given: &str) -> Result<(), Refusal> {
        if self.admin.is_none() && self.app.is_none() {
            return Ok(());
        }
        // Both tokens are always compared, so timing does not tell which one a guess was near.
        let admin = self.admin.is_some_and(|t| matches(given, t));
        let app = self.app.is_some_and(|t| matches(given, t));
        match act {
            Act::Admin if self.admin.is_none() => Err(Refusal::Closed),
            Act::Admin if admin => Ok(()),
            Act::App if admin | app => Ok(()),
            _ => Err(Refusal::NoToken),
        }
    }
}

/// Checks a token before serving: `name` is `admin` or `app`. A token must be something a client
/// can send in a header as it is: printable ASCII without spaces (HTTP trims the spaces around a
/// header's value, and cannot carry control characters), and not empty.
pub(crate) fn check_token(name: &str, token: &str) -> Result<(), String> {
    if token.trim().is_empty() {
        return Err(format!(
            "the {name} token must not be empty (leave it unset to run without one)"
        ));
    }
    if let Some((at, c)) = token.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(format!(
            "the {name} token has {c:?} at byte {at}: a token is printable ASCII without spaces, \
             so a client can send it in an Authorization header as it is"
        ));
    }
    Ok(())
}

/// The token of an `Authorization` value (an HTTP header or gRPC metadata), `""` without one.
pub(crate) fn bearer(authorization: Option<&str>) -> &str {
    authorization
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
}

/// `subtle` compares in time that depends only on the lengths, not on where they differ.
fn matches(given: &str, token: &str) -> bool {
    bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens<'a>(admin: Option<&'a str>, app: Option<&'a str>) -> Tokens<'a> {
        Tokens { admin, app }
    }

    #[test]
    fn tokens_pass_only_when_identical() {
        let both = tokens(Some("secret"), None);
        assert!(both.authorize(Act::Admin, "secret").is_ok());
        assert!(both.authorize(Act::Admin, "secreT").is_err());
        assert!(both.authorize(Act::Admin, "secret!").is_err());
        assert!(both.authorize(Act::Admin, "").is_err());
    }

    #[test]
    fn app_acts_take_either_token_and_admin_acts_only_the_admin_one() {
        let both = tokens(Some("admin"), Some("app"));
        assert_eq!(both.authorize(Act::App, "app"), Ok(()));
        assert_eq!(both.authorize(Act::App, "admin"), Ok(()));
        assert_eq!(both.authorize(Act::App, "ap"), Err(Refusal::NoToken));
        assert_eq!(both.authorize(Act::App, ""), Err(Refusal::NoToken));
        assert_eq!(both.authorize(Act::Admin, "app"), Err(Refusal::NoToken));
    }

    #[test]
    fn everything_is_open_only_without_any_token() {
        let none = tokens(None, None);
        assert_eq!(none.authorize(Act::App, ""), Ok(()));
        assert_eq!(none.authorize(Act::Admin, ""), Ok(()));
        let admin_only = tokens(Some("admin"), None);
        assert_eq!(admin_only.authorize(Act::App, ""), Err(Refusal::NoToken));
        assert_eq!(admin_only.authorize(Act::App, "admin"), Ok(()));
    }

    #[test]
    fn with_only_an_app_token_admin_acts_are_closed_to_everyone() {
        let app_only = tokens(None, Some("app"));
        assert_eq!(app_only.authorize(Act::App, "app"), Ok(()));
        assert_eq!(app_only.authorize(Act::App, ""), Err(Refusal::NoToken));
        assert_eq!(app_only.authorize(Act::Admin, ""), Err(Refusal::Closed));
        assert_eq!(app_only.authorize(Act::Admin, "app"), Err(Refusal::Closed));
    }

    #[test]
    fn tokens_a_header_cannot_carry_are_refused() {
        assert!(check_token("app", "abc-DEF_123.~+/=").is_ok());
        assert_eq!(
            check_token("admin", "s3cret ").unwrap_err(),
            "the admin token has ' ' at byte 6: a token is printable ASCII without spaces, so a \
             client can send it in an Authorization header as it is"
        );
        assert!(check_token("app", "a\nb").is_err());
        assert!(check_token("app", "clé").is_err());
        assert!(
            check_token("app", "  ")
                .unwrap_err()
                .contains("must not be empty")
        );
    }
}
