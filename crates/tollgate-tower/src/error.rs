//! Errors from building a layer, a rule or a client address extractor. Requests never produce an
//! `Error`: every way a request can fail becomes a response (see [`problem`](crate::problem)).

/// A setting that cannot be used, caught when the layer is built rather than on a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CIDR block (such as `10.0.0.0/8`) could not be parsed.
    #[error("invalid CIDR `{input}`: {reason}")]
    BadCidr {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A prefix length is longer than the address.
    #[error("IPv{version} prefix length {len} is above the maximum of {max}")]
    BadPrefixLen {
        /// 4 or 6.
        version: u8,
        /// The length given.
        len: u8,
        /// The longest accepted length: 32 or 128.
        max: u8,
    },
    /// A rule's cost is zero or more than its policy can ever admit at once.
    #[error("cost {cost} for policy `{policy}` is outside 1 to {max}")]
    BadCost {
        /// The cost given.
        cost: u64,
        /// The policy's limit, capacity or burst.
        max: u64,
        /// The policy's name.
        policy: String,
    },
    /// Two rules use one policy name for two different policies, so they would count into the
    /// same state by different settings.
    #[error("policy name `{0}` names two different policies")]
    DuplicatePolicy(String),
    /// The layer was built without any rule.
    #[error("a rate limit layer needs at least one rule")]
    NoRules,
}

impl From<tollgate::CidrError> for Error {
    fn from(err: tollgate::CidrError) -> Self {
        Error::BadCidr {
            input: err.input().to_owned(),
            reason: err.reason(),
        }
    }
}
