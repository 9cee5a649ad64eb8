//! [`ClientIp`]: which address a request comes from, directly or behind trusted proxies.
//!
//! # The peer
//!
//! The peer is the address of the TCP connection, read from axum's
//! [`ConnectInfo<SocketAddr>`](axum::extract::ConnectInfo) extension (serve the app with
//! `into_make_service_with_connect_info::<SocketAddr>()`), or from a plain [`SocketAddr`]
//! extension (what a hyper server loop can insert). Without either, there is no address: the
//! app was served without connect info, so the layer answers `500 Internal Server Error` with a
//! problem naming the fix, and logs it once, whatever the rule's
//! [`MissingKey`](crate::MissingKey) says (skipping would silently turn the limit off).
//!
//! # Behind proxies
//!
//! When the peer is inside one of the trusted proxy blocks, the chosen header
//! ([`ProxyHeader`]) is read and walked from the right, the end the trusted proxies wrote: each
//! entry that is a trusted proxy is stepped over, and the first entry that is not is the client.
//! A peer that is not a trusted proxy is the client, and its headers are ignored entirely, so a
//! client cannot choose its own key by sending `X-Forwarded-For`.
//!
//! The walk stops at an entry that names no usable address (garbage, `unknown`, an obfuscated
//! `Forwarded` identifier): the client is then the last address reached, which is a trusted
//! proxy. Requests with a malformed chain so share their proxy's key, which is strict (they share
//! one budget) rather than spoofable. If every entry is a trusted proxy, the client is the
//! leftmost one; an empty or absent header leaves the peer as the client.
//!
//! # Normalising and grouping
//!
//! Addresses are canonical: an IPv4-mapped IPv6 address (`::ffff:192.0.2.1`, as a dual-stack
//! listener reports IPv4 clients) is the IPv4 address. One IPv6 client usually holds a whole /64,
//! so [`ClientIp::ipv6_prefix`] can make every address of a prefix share one key.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;

use super::forwarded::{self, Hop};
use crate::Error;
use tollgate::Cidr;
use tollgate::cidr::masked;

/// Which header a trusted proxy writes the chain to.
///
/// Trust only the header your proxies actually set (and overwrite or append to): if they set
/// `X-Forwarded-For` but pass a client's `Forwarded` through untouched, trusting `Forwarded`
/// would let the client pick its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`, the de facto standard.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`, reading each element's `for=` parameter.
    Forwarded,
}

/// How the client address of a request is found, and how finely it is keyed.
///
/// ```
/// use tollgate_tower::{ClientIp, ProxyHeader};
///
/// // Directly exposed: the peer address, with every IPv6 /64 as one client.
/// let direct = ClientIp::peer().ipv6_prefix(64)?;
///
/// // Behind a load balancer on 10.0.0.0/8 that appends to X-Forwarded-For.
/// let behind = ClientIp::peer()
///     .trust_proxies(["10.0.0.0/8".parse()?, "fd00::/8".parse()?])
///     .proxy_header(ProxyHeader::XForwardedFor);
/// # let _ = (direct, behind);
/// # Ok::<(), tollgate_tower::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientIp {
    trusted: Vec<Cidr>,
    header: ProxyHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

impl Default for ClientIp {
    fn default() -> Self {
        Self::peer()
    }
}

impl ClientIp {
    /// The peer address of the connection, no proxies trusted, one key per address.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::extract::ConnectInfo;
    /// use axum::http::Request;
    /// use tollgate_tower::ClientIp;
    ///
    /// let mut request = Request::new(());
    /// request.extensions_mut().insert(ConnectInfo("[::ffff:192.0.2.9]:4000".parse::<SocketAddr>()?));
    /// let (parts, ()) = request.into_parts();
    /// assert_eq!(ClientIp::peer().client(&parts), Some("192.0.2.9".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peer() -> Self {
        ClientIp {
            trusted: Vec::new(),
            header: ProxyHeader::default(),
            ipv4_prefix: 32,
            ipv6_prefix: 128,
        }
    }

    /// Adds trusted proxy blocks: a peer inside one of them is a proxy, and the client is read
    /// from the [`ProxyHeader`].
    ///
    /// ```
    /// let ip = tollgate_tower::ClientIp::peer().trust_proxies(["127.0.0.1".parse()?]);
    /// assert_eq!(ip.trusted_proxies().len(), 1);
    /// # Ok::<(), tollgate_tower::Error>(())
    /// ```
    pub fn trust_proxies(mut self, blocks: impl IntoIterator<Item = Cidr>) -> Self {
        self.trusted.extend(blocks);
        self
    }

    /// Which header trusted proxies write (default `X-Forwarded-For`).
    ///
    /// ```
    /// use tollgate_tower::{ClientIp, ProxyHeader};
    ///
    /// let ip = ClientIp::peer().proxy_header(ProxyHeader::Forwarded);
    /// assert_eq!(ip.header(), ProxyHeader::Forwarded);
    /// ```
    pub fn proxy_header(mut self, header: ProxyHeader) -> Self {
        self.header = header;
        self
    }

    /// Keys IPv6 clients by their first `len` bits (0 to 128; default 128, one key per address).
    /// With 64, every address of a /64 shares one budget.
    ///
    /// ```
    /// assert!(tollgate_tower::ClientIp::peer().ipv6_prefix(129).is_err());
    /// ```
    pub fn ipv6_prefix(mut self, len: u8) -> Result<Self, Error> {
        if len > 128 {
            return Err(Error::BadPrefixLen {
                version: 6,
                len,
                max: 128,
            });
        }
        self.ipv6_prefix = len;
        Ok(self)
    }

    /// Keys IPv4 clients by their first `len` bits (0 to 32; default 32, one key per address).
    ///
    /// ```
    /// assert!(tollgate_tower::ClientIp::peer().ipv4_prefix(24).is_ok());
    /// ```
    pub fn ipv4_prefix(mut self, len: u8) -> Result<Self, Error> {
        if len > 32 {
            return Err(Error::BadPrefixLen {
                version: 4,
                len,
                max: 32,
            });
        }
        self.ipv4_prefix = len;
        Ok(self)
    }

    /// The trusted proxy blocks.
    ///
    /// ```
    /// assert!(tollgate_tower::ClientIp::peer().trusted_proxies().is_empty());
    /// ```
    pub fn trusted_proxies(&self) -> &[Cidr] {
        &self.trusted
    }

    /// The header read behind trusted proxies.
    ///
    /// ```
    /// use tollgate_tower::{ClientIp, ProxyHeader};
    ///
    /// assert_eq!(ClientIp::peer().header(), ProxyHeader::XForwardedFor);
    /// ```
    pub fn header(&self) -> ProxyHeader {
        self.header
    }

    /// The canonical peer address: [`ConnectInfo<SocketAddr>`](ConnectInfo) first, then a plain
    /// [`SocketAddr`] extension. `None` when the request carries neither.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::http::Request;
    /// use tollgate_tower::ClientIp;
    ///
    /// let mut request = Request::new(());
    /// assert_eq!(ClientIp::peer_addr(&request.clone().into_parts().0), None);
    /// request.extensions_mut().insert("[2001:db8::1]:443".parse::<SocketAddr>()?);
    /// assert_eq!(ClientIp::peer_addr(&request.into_parts().0), Some("2001:db8::1".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peer_addr(parts: &Parts) -> Option<IpAddr> {
        let socket = match parts.extensions.get::<ConnectInfo<SocketAddr>>() {
            Some(ConnectInfo(socket)) => socket,
            None => parts.extensions.get::<SocketAddr>()?,
        };
        Some(socket.ip().to_canonical())
    }

    /// The client's canonical address (before grouping): the peer, or the hop found behind
    /// trusted proxies as the module docs describe. `None` without a peer address.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::extract::ConnectInfo;
    /// use axum::http::Request;
    /// use tollgate_tower::ClientIp;
    ///
    /// let ip = ClientIp::peer().trust_proxies(["10.0.0.0/8".parse()?]);
    /// let request = Request::builder()
    ///     .header("x-forwarded-for", "198.51.100.1, 203.0.113.5, 10.0.0.2")
    ///     .extension(ConnectInfo("10.0.0.1:9000".parse::<SocketAddr>()?))
    ///     .body(())?;
    /// // 10.0.0.2 is a trusted proxy; 203.0.113.5 is not, so it is the client.
    /// assert_eq!(ip.client(&request.into_parts().0), Some("203.0.113.5".parse()?));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn client(&self, parts: &Parts) -> Option<IpAddr> {
        let peer = Self::peer_addr(parts)?;
        if !self.is_trusted(peer) {
            return Some(peer);
        }
        Some(self.behind_proxies(peer, parts))
    }

    /// The client behind `peer`, a trusted proxy: the walk the module docs describe. Out of
    /// line, off the road of a peer that is the client.
    #[inline(never)]
    fn behind_proxies(&self, peer: IpAddr, parts: &Parts) -> IpAddr {
        let hops = match self.header {
            ProxyHeader::XForwardedFor => forwarded::x_forwarded_for(&parts.headers),
            ProxyHeader::Forwarded => forwarded::forwarded(&parts.headers),
        };
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop {
                Hop::Addr(ip) => client = ip.to_canonical(),
                Hop::Unusable => break,
            }
            if !self.is_trusted(client) {
                break;
            }
        }
        client
    }

    /// The key text for the client: the address, or its prefix block (`2001:db8:1:2::/64`) when
    /// grouping applies. `None` without a peer address.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::http::Request;
    /// use tollgate_tower::ClientIp;
    ///
    /// let mut request = Request::new(());
    /// request.extensions_mut().insert("[2001:db8:1:2:aaaa::1]:443".parse::<SocketAddr>()?);
    /// let parts = request.into_parts().0;
    /// assert_eq!(ClientIp::peer().ipv6_prefix(64)?.key(&parts).as_deref(), Some("2001:db8:1:2::/64"));
    /// assert_eq!(ClientIp::peer().key(&parts).as_deref(), Some("2001:db8:1:2:aaaa::1"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key(&self, parts: &Parts) -> Option<String> {
        let key = self.inline_key(parts)?;
        Some(String::from_utf8_lossy(key.as_bytes()).into_owned())
    }

    /// [`key`](Self::key)'s text, written into a buffer on the stack.
    pub(crate) fn inline_key(&self, parts: &Parts) -> Option<InlineKey> {
        let client = self.client(parts)?;
        let mut key = InlineKey::default();
        match client {
            IpAddr::V4(v4) if self.ipv4_prefix == 32 => key.push_ipv4(v4.octets()),
            _ => self.push_other(&mut key, client),
        }
        Some(key)
    }

    /// [`inline_key`](Self::inline_key) of an IPv6 address or a grouped one, written by the
    /// formatter: out of line, so a whole IPv4 address, written from a table, stays short.
    #[inline(never)]
    fn push_other(&self, key: &mut InlineKey, client: IpAddr) {
        let (len, full) = match client {
            IpAddr::V4(_) => (self.ipv4_prefix, 32),
            IpAddr::V6(_) => (self.ipv6_prefix, 128),
        };
        if len == full {
            key.push_display(&client);
        } else {
            key.push_display(&masked(client, len));
            key.push(b"/");
            key.push(itoa::Buffer::new().format(len).as_bytes());
        }
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|block| block.contains(ip))
    }
}

/// The longest key text of an address: a full IPv6 address is at most 39 characters, `/128`
/// adds 4.
const INLINE_KEY_CAP: usize = 48;

/// Every octet's decimal digits followed by a dot, padded to 4 bytes, with the digit count:
/// `"7.  "` and 1, `"192."` and 3.
static OCTET_TEXT: [([u8; 4], u8); 256] = octet_text();

const fn octet_text() -> [([u8; 4], u8); 256] {
    let mut table = [([0; 4], 0); 256];
    let mut n = 0;
    while n < 256 {
        let (hundreds, tens, ones) = ((n / 100) as u8, (n / 10 % 10) as u8, (n % 10) as u8);
        table[n] = if n >= 100 {
            ([b'0' + hundreds, b'0' + tens, b'0' + ones, b'.'], 3)
        } else if n >= 10 {
            ([b'0' + tens, b'0' + ones, b'.', 0], 2)
        } else {
            ([b'0' + ones, b'.', 0, 0], 1)
        };
        n += 1;
    }
    table
}

/// An address key's text, in a buffer on the stack: no allocation per request.
#[derive(Clone, Copy)]
pub(crate) struct InlineKey {
    bytes: [u8; INLINE_KEY_CAP],
    len: usize,
}

impl Default for InlineKey {
    fn default() -> Self {
        InlineKey {
            bytes: [0; INLINE_KEY_CAP],
            len: 0,
        }
    }
}

impl InlineKey {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Appends `bytes`; the capacity holds any address text (see [`INLINE_KEY_CAP`]), and
    /// anything beyond it would be cut, which the tests below rule out for every form.
    fn push(&mut self, bytes: &[u8]) {
        let end = (self.len + bytes.len()).min(INLINE_KEY_CAP);
        self.bytes[self.len..end].copy_from_slice(&bytes[..end - self.len]);
        self.len = end;
    }

    /// Appends the dotted quad, as `Ipv4Addr`'s `Display` writes it, from a table of every
    /// octet's digits: fixed-size copies, no formatting. At most 15 bytes, and the key is empty
    /// when this is called, so every write is inside the buffer.
    fn push_ipv4(&mut self, octets: [u8; 4]) {
        let mut at = self.len;
        for (i, octet) in octets.into_iter().enumerate() {
            let (digits, len) = OCTET_TEXT[usize::from(octet)];
            if let Some(out) = self.bytes.get_mut(at..at + 4) {
                // The digits and a dot; a shorter octet's dot lands where its padding went.
                out.copy_from_slice(&digits);
            }
            at += usize::from(len) + usize::from(i < 3);
        }
        self.len = at.min(INLINE_KEY_CAP);
    }

    fn push_display(&mut self, value: &impl fmt::Display) {
        // Writing into the buffer cannot fail; `push` bounds it.
        let _ = fmt::Write::write_fmt(self, format_args!("{value}"));
    }
}

impl fmt::Write for InlineKey {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

impl fmt::Debug for InlineKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("InlineKey")
            .field(&String::from_utf8_lossy(self.as_bytes()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    #[test]
    fn inline_keys_match_the_display_of_every_address_form() {
        let v6 = ClientIp::peer();
        let longest = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:1";
        for (peer, want) in [
            ("0.0.0.0:1", "0.0.0.0"),
            ("255.255.255.255:1", "255.255.255.255"),
            ("10.20.0.7:1", "10.20.0.7"),
            ("[::ffff:192.0.2.9]:1", "192.0.2.9"),
            (longest, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"),
            ("[::1]:1", "::1"),
        ] {
            assert_eq!(v6.key(&parts(peer, &[])).as_deref(), Some(want), "{peer}");
            let ip: SocketAddr = peer.parse().expect("test peer");
            assert_eq!(want, ip.ip().to_canonical().to_string());
        }
        let grouped = ClientIp::peer().ipv6_prefix(127).expect("valid");
        assert_eq!(
            grouped.key(&parts(longest, &[])).as_deref(),
            Some("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127")
        );
        let v4 = ClientIp::peer().ipv4_prefix(31).expect("valid");
        assert_eq!(
            v4.key(&parts("255.255.255.255:1", &[])).as_deref(),
            Some("255.255.255.254/31")
        );
    }

    #[test]
    fn every_octet_is_written_as_display_writes_it() {
        let ip = ClientIp::peer();
        for n in 0..=255u8 {
            for octets in [
                [n, 0, 0, 0],
                [255, n, 9, 10],
                [1, 99, n, 100],
                [200, 7, 50, n],
                [n; 4],
            ] {
                let addr = std::net::Ipv4Addr::from(octets);
                let key = ip.key(&parts(&format!("{addr}:1"), &[]));
                assert_eq!(key, Some(addr.to_string()), "{octets:?}");
            }
        }
    }

    fn parts(peer: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = Request::builder();
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let mut request = builder.body(()).expect("test request");
        let socket: SocketAddr = peer.parse().expect("test peer");
        request.extensions_mut().insert(ConnectInfo(socket));
        request.into_parts().0
    }

    fn behind(blocks: &[&str]) -> ClientIp {
        ClientIp::peer().trust_proxies(blocks.iter().map(|b| b.parse().expect("test block")))
    }

    fn client(ip: &ClientIp, parts: &Parts) -> String {
        ip.client(parts).expect("peer present").to_string()
    }

    #[test]
    fn untrusted_peer_headers_are_ignored() {
        let p = parts(
            "203.0.113.9:1000",
            &[("x-forwarded-for", "1.2.3.4"), ("forwarded", "for=1.2.3.4")],
        );
        assert_eq!(client(&behind(&["10.0.0.0/8"]), &p), "203.0.113.9");
        assert_eq!(
            client(&behind(&["10.0.0.0/8"]).proxy_header(ProxyHeader::Forwarded), &p),
            "203.0.113.9"
        );
    }

    #[test]
    fn walks_past_trusted_hops_from_the_right() {
        let p = parts(
            "10.0.0.1:1000",
            &[("x-forwarded-for", "6.6.6.6, 198.51.100.4, 10.0.0.7, 10.0.0.8")],
        );
        assert_eq!(client(&behind(&["10.0.0.0/8"]), &p), "198.51.100.4");
    }

    #[test]
    fn a_malformed_hop_stops_the_walk_at_the_last_address_reached() {
        let p = parts(
            "10.0.0.1:1000",
            &[("x-forwarded-for", "198.51.100.4, garbage, 10.0.0.7")],
        );
        assert_eq!(client(&behind(&["10.0.0.0/8"]), &p), "10.0.0.7");
        let p = parts("10.0.0.1:1000", &[("x-forwarded-for", "198.51.100.4, garbage")]);
        assert_eq!(client(&behind(&["10.0.0.0/8"]), &p), "10.0.0.1");
    }

    #[test]
    fn all_trusted_chain_gives_the_leftmost_and_no_header_gives_the_peer() {
        let p = parts("10.0.0.1:1000", &[("x-forwarded-for", "10.1.1.1, 10.2.2.2")]);
        assert_eq!(client(&behind(&["10.0.0.0/8"]), &p), "10.1.1.1");
        let p = parts("10.0.0.1:1000", &[]);
        assert_eq!(client(&behind(&["10.0.0.0/8"]), &p), "10.0.0.1");
    }

    #[test]
    fn forwarded_header_is_read_when_chosen() {
        let p = parts(
            "[::1]:1000",
            &[
                (
                    "forwarded",
                    r#"for="[2001:db8::5]:80";proto=https, for=127.0.0.1"#,
                ),
                ("x-forwarded-for", "9.9.9.9"),
            ],
        );
        let ip = behind(&["::1", "127.0.0.0/8"]).proxy_header(ProxyHeader::Forwarded);
        assert_eq!(client(&ip, &p), "2001:db8::5");
        assert_eq!(client(&behind(&["::1"]), &p), "9.9.9.9");
    }

    #[test]
    fn mapped_addresses_are_normalised_everywhere() {
        let p = parts(
            "[::ffff:10.0.0.1]:1000",
            &[("x-forwarded-for", "::ffff:198.51.100.4")],
        );
        assert_eq!(client(&behind(&["10.0.0.0/8"]), &p), "198.51.100.4");
    }

    #[test]
    fn grouping_applies_per_family() {
        let ip = ClientIp::peer()
            .ipv6_prefix(48)
            .and_then(|ip| ip.ipv4_prefix(24))
            .expect("valid lengths");
        assert_eq!(
            ip.key(&parts("[2001:db8:1:2::1]:1", &[])).as_deref(),
            Some("2001:db8:1::/48")
        );
        assert_eq!(
            ip.key(&parts("192.0.2.200:1", &[])).as_deref(),
            Some("192.0.2.0/24")
        );
        let everyone = ClientIp::peer().ipv6_prefix(0).expect("valid");
        assert_eq!(
            everyone.key(&parts("[2001:db8::1]:1", &[])).as_deref(),
            Some("::/0")
        );
    }
}
