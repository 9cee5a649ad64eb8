//! [`Cidr`]: an address block such as `198.51.100.0/24`, the one block type of every crate:
//! allow and deny list ranges here, the trusted proxies of the tower layer and of the proxy.
//!
//! Addresses are compared in canonical form: an IPv4-mapped IPv6 address (`::ffff:10.1.2.3`) is
//! the IPv4 address it maps, both when a block is built and when an address is tested, so a
//! mapped block (`::ffff:198.51.100.0/120`) is the IPv4 block it maps and a dual-stack listener
//! reporting mapped addresses matches IPv4 blocks. Bits of the address past the prefix must be
//! zero: `198.51.100.1/24` is refused rather than guessed at, since this is security
//! configuration.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An IPv4 or IPv6 address block: an address and a prefix length.
///
/// Parsed from `addr/len` or a bare address (a block of one).
///
/// ```
/// use tollgate::Cidr;
///
/// let proxies: Cidr = "198.51.100.0/24".parse()?;
/// assert!(proxies.contains("198.51.100.40".parse()?));
/// assert!(proxies.contains("::ffff:198.51.100.1".parse()?)); // IPv4-mapped
/// assert!(!proxies.contains("203.0.113.1".parse()?));
/// assert!("198.51.100.1/24".parse::<Cidr>().is_err());
/// assert_eq!("::ffff:198.51.100.0/120".parse::<Cidr>()?, proxies);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

/// Why a block could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CidrError {
    /// Not an address, or a prefix length that is not a number the address can take.
    #[error("invalid CIDR `{input}`: {reason}")]
    Malformed {
        /// The text given (its first 64 characters).
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Bits set past the prefix: almost always a typo for the network.
    #[error("\"{input}\" has bits set after the /{len}; the range is {network}")]
    HostBits {
        /// The text given.
        input: String,
        /// Its prefix length.
        len: u8,
        /// The block the address is in.
        network: Cidr,
    },
}

impl CidrError {
    /// What is wrong, in a few words.
    ///
    /// ```
    /// assert_eq!("10.0.0.1/8".parse::<tollgate::Cidr>().unwrap_err().reason(), "address has bits set past the prefix length");
    /// ```
    pub fn reason(&self) -> &'static str {
        match self {
            CidrError::Malformed { reason, .. } => reason,
            CidrError::HostBits { .. } => "address has bits set past the prefix length",
        }
    }

    /// The text given.
    pub fn input(&self) -> &str {
        match self {
            CidrError::Malformed { input, .. } | CidrError::HostBits { input, .. } => input,
        }
    }
}

impl Cidr {
    /// The block of `addr` with prefix length `len` (at most 32 for IPv4, 128 for IPv6), its
    /// bits past the prefix cleared. An IPv4-mapped IPv6 block of length 96 or more becomes
    /// the IPv4 block it maps.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv6Addr};
    /// use tollgate::Cidr;
    ///
    /// let block = Cidr::new(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)), 32)?;
    /// assert_eq!(block.to_string(), "2001:db8::/32");
    /// assert!(Cidr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 129).is_err());
    /// # Ok::<(), tollgate::CidrError>(())
    /// ```
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, CidrError> {
        let (addr, len) = canonical(addr, len);
        if len > max_len(addr) {
            return Err(CidrError::Malformed {
                input: format!("{addr}/{len}"),
                reason: "prefix length is longer than the address",
            });
        }
        Ok(Cidr {
            addr: masked(addr, len),
            len,
        })
    }

    /// The first address of the block.
    ///
    /// ```
    /// let block: tollgate::Cidr = "192.0.2.0/24".parse()?;
    /// assert_eq!(block.addr().to_string(), "192.0.2.0");
    /// # Ok::<(), tollgate::CidrError>(())
    /// ```
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The last address of the block.
    ///
    /// ```
    /// let block: tollgate::Cidr = "192.0.2.0/24".parse()?;
    /// assert_eq!(block.last().to_string(), "192.0.2.255");
    /// # Ok::<(), tollgate::CidrError>(())
    /// ```
    pub fn last(&self) -> IpAddr {
        match self.addr {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from_bits(v4.to_bits() | !mask_v4(self.len))),
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() | !mask_v6(self.len))),
        }
    }

    /// The prefix length.
    ///
    /// ```
    /// let block: tollgate::Cidr = "192.0.2.7".parse()?;
    /// assert_eq!(block.len(), 32);
    /// # Ok::<(), tollgate::CidrError>(())
    /// ```
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether `ip` (in canonical form) is inside the block. An IPv4 address is also inside an
    /// IPv6 block that holds its mapped form, such as `::/0`.
    ///
    /// ```
    /// let everyone: tollgate::Cidr = "::/0".parse()?;
    /// assert!(everyone.contains("198.51.100.1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                masked(ip, self.len) == self.addr
            }
            (IpAddr::V6(_), IpAddr::V4(v4)) => masked(IpAddr::V6(v4.to_ipv6_mapped()), self.len) == self.addr,
            (IpAddr::V4(_), IpAddr::V6(_)) => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(input: &str) -> Result<Self, CidrError> {
        let bad = |reason| CidrError::Malformed {
            input: input.chars().take(64).collect(),
            reason,
        };
        let text = input.trim();
        let (addr_text, len_text) = match text.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (text, None),
        };
        let addr: IpAddr = addr_text
            .parse()
            .map_err(|_| bad("not an IPv4 or IPv6 address"))?;
        let len = match len_text {
            None => max_len(addr),
            // Digits only: `u8::from_str` would also take a leading `+`.
            Some(len) if !len.is_empty() && len.len() <= 3 && len.bytes().all(|b| b.is_ascii_digit()) => len
                .parse::<u8>()
                .map_err(|_| bad("prefix length is not a number from 0 to 128"))?,
            Some(_) => return Err(bad("prefix length is not a number from 0 to 128")),
        };
        let block = Cidr::new(addr, len).map_err(|_| bad("prefix length is longer than the address"))?;
        if canonical(addr, len).0 != block.addr {
            return Err(CidrError::HostBits {
                input: text.to_owned(),
                len: block.len,
                network: block,
            });
        }
        Ok(block)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An IPv4-mapped block of length 96 or more as the IPv4 block it maps; any other as it is.
fn canonical(addr: IpAddr, len: u8) -> (IpAddr, u8) {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) if (96..=128).contains(&len) => (IpAddr::V4(v4), len - 96),
            _ => (addr, len),
        },
        IpAddr::V4(_) => (addr, len),
    }
}

fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// `addr` with every bit past the first `len` cleared.
///
/// ```
/// use std::net::IpAddr;
///
/// let ip: IpAddr = "2001:db8:1:2::7".parse()?;
/// assert_eq!(tollgate::cidr::masked(ip, 48).to_string(), "2001:db8:1::");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn masked(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from_bits(v4.to_bits() & mask_v4(len))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & mask_v6(len))),
    }
}

fn mask_v4(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0)
}

fn mask_v6(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("test address")
    }

    #[test]
    fn parses_blocks_and_single_addresses() {
        let block: Cidr = "2001:db8::/32".parse().expect("valid");
        assert_eq!(block.len(), 32);
        assert!(block.contains(ip("2001:db8:ffff::1")));
        assert!(!block.contains(ip("2001:db9::1")));
        let single: Cidr = " 192.0.2.7 ".parse().expect("valid");
        assert_eq!(single.to_string(), "192.0.2.7/32");
        assert!(single.contains(ip("192.0.2.7")));
        assert!(!single.contains(ip("192.0.2.8")));
    }

    #[test]
    fn zero_length_blocks_hold_every_address_of_their_family() {
        let all_v4: Cidr = "0.0.0.0/0".parse().expect("valid");
        assert!(all_v4.contains(ip("203.0.113.9")));
        assert!(!all_v4.contains(ip("2001:db8::1")));
        assert_eq!(all_v4.last(), ip("255.255.255.255"));
    }

    #[test]
    fn mapped_blocks_become_ipv4_and_hold_both_spellings() {
        let block: Cidr = "::ffff:198.51.100.0/120".parse().expect("valid");
        assert_eq!(block.to_string(), "198.51.100.0/24");
        assert!(block.contains(ip("198.51.100.9")));
        assert!(block.contains(ip("::ffff:198.51.100.9")));
        assert!(matches!(
            "::ffff:198.51.100.1/120".parse::<Cidr>(),
            Err(CidrError::HostBits { .. })
        ));
    }

    #[test]
    fn refuses_malformed_blocks() {
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "host/8",
            "10.0.0.0/8/8",
        ] {
            assert!(
                matches!(bad.parse::<Cidr>(), Err(CidrError::Malformed { .. })),
                "{bad:?}"
            );
        }
        let typo = "10.0.0.1/8".parse::<Cidr>().unwrap_err();
        assert_eq!(
            typo.to_string(),
            "\"10.0.0.1/8\" has bits set after the /8; the range is 10.0.0.0/8"
        );
    }
}
