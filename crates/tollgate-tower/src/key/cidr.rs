//! [`Cidr`]: an address block such as `198.51.100.0/24`, for the trusted proxy list.
//!
//! Addresses are compared in canonical form: an IPv4-mapped IPv6 address (`::ffff:10.1.2.3`) is
//! the IPv4 address it maps, both when a block is built and when an address is tested, so a
//! dual-stack listener reporting mapped addresses matches IPv4 blocks.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use crate::Error;

/// An IPv4 or IPv6 address block: an address and a prefix length.
///
/// Parsed from `addr/len` or a bare address (a block of one). Bits of the address past the prefix
/// must be zero: `198.51.100.1/24` is refused rather than guessed at, since this is security
/// configuration.
///
/// ```
/// use tollgate_tower::Cidr;
///
/// let proxies: Cidr = "198.51.100.0/24".parse()?;
/// assert!(proxies.contains("198.51.100.40".parse()?));
/// assert!(proxies.contains("::ffff:198.51.100.1".parse()?)); // IPv4-mapped
/// assert!(!proxies.contains("203.0.113.1".parse()?));
/// assert!("198.51.100.1/24".parse::<Cidr>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    /// The block of `addr` with prefix length `len` (at most 32 for IPv4, 128 for IPv6). An
    /// IPv4-mapped IPv6 block of length 96 or more becomes the IPv4 block it maps.
    ///
    /// ```
    /// use std::net::{IpAddr, Ipv6Addr};
    /// use tollgate_tower::Cidr;
    ///
    /// let block = Cidr::new(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0)), 32)?;
    /// assert_eq!(block.to_string(), "2001:db8::/32");
    /// assert!(Cidr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 129).is_err());
    /// # Ok::<(), tollgate_tower::Error>(())
    /// ```
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, Error> {
        let (addr, len) = match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) if (96..=128).contains(&len) => (IpAddr::V4(v4), len - 96),
                _ => (addr, len),
            },
            IpAddr::V4(_) => (addr, len),
        };
        let max = max_len(addr);
        if len > max {
            return Err(Error::BadPrefixLen {
                version: if addr.is_ipv4() { 4 } else { 6 },
                len,
                max,
            });
        }
        Ok(Cidr { addr, len })
    }

    /// The first address of the block.
    ///
    /// ```
    /// let block: tollgate_tower::Cidr = "192.0.2.0/24".parse()?;
    /// assert_eq!(block.addr().to_string(), "192.0.2.0");
    /// # Ok::<(), tollgate_tower::Error>(())
    /// ```
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    ///
    /// ```
    /// let block: tollgate_tower::Cidr = "192.0.2.7".parse()?;
    /// assert_eq!(block.len(), 32);
    /// # Ok::<(), tollgate_tower::Error>(())
    /// ```
    #[allow(clippy::len_without_is_empty)] // a prefix length, not a collection
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether `ip` (in canonical form) is inside the block. An IPv4 address is also inside an
    /// IPv6 block that holds its mapped form, such as `::/0`.
    ///
    /// ```
    /// let everyone: tollgate_tower::Cidr = "::/0".parse()?;
    /// assert!(everyone.contains("198.51.100.1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => mask_v4(ip, self.len) == net,
            (IpAddr::V6(net), IpAddr::V6(ip)) => mask_v6(ip, self.len) == net,
            (IpAddr::V6(net), IpAddr::V4(ip)) => mask_v6(ip.to_ipv6_mapped(), self.len) == net,
            (IpAddr::V4(_), IpAddr::V6(_)) => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = Error;

    fn from_str(input: &str) -> Result<Self, Error> {
        let bad = |reason| Error::BadCidr {
            input: input.to_owned(),
            reason,
        };
        let (addr_text, len_text) = match input.trim().split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (input.trim(), None),
        };
        let addr: IpAddr = addr_text
            .parse()
            .map_err(|_| bad("not an IPv4 or IPv6 address"))?;
        let len = match len_text {
            Some(text) => text
                .parse::<u8>()
                .map_err(|_| bad("prefix length is not a number from 0 to 128"))?,
            None => max_len(addr),
        };
        let block = Cidr::new(addr, len).map_err(|_| bad("prefix length is longer than the address"))?;
        if masked(block.addr, block.len) != block.addr {
            return Err(bad("address has bits set past the prefix length"));
        }
        Ok(block)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// `addr` with every bit past the first `len` cleared.
pub(crate) fn masked(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V4(mask_v4(v4, len)),
        IpAddr::V6(v6) => IpAddr::V6(mask_v6(v6, len)),
    }
}

fn mask_v4(addr: Ipv4Addr, len: u8) -> Ipv4Addr {
    let mask = u32::MAX.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0);
    Ipv4Addr::from_bits(addr.to_bits() & mask)
}

fn mask_v6(addr: Ipv6Addr, len: u8) -> Ipv6Addr {
    let mask = u128::MAX.checked_shl(128 - u32::from(len.min(128))).unwrap_or(0);
    Ipv6Addr::from_bits(addr.to_bits() & mask)
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
    }

    #[test]
    fn mapped_blocks_become_ipv4() {
        let block: Cidr = "::ffff:10.0.0.0/104".parse().expect("valid");
        assert_eq!(block.to_string(), "10.0.0.0/8");
        assert!(block.contains(ip("10.9.9.9")));
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
            "host/8",
            "10.0.0.1/8",
            "10.0.0.0/8/8",
        ] {
            assert!(
                matches!(bad.parse::<Cidr>(), Err(Error::BadCidr { .. })),
                "{bad:?}"
            );
        }
    }
}
