//! [`AddressSlots`]: how many connections of one listener each client address holds, so that
//! one address cannot take the whole connection limit and lock every other client out.
//!
//! A client is its IPv4 address, or its IPv6 /64: one host is normally handed a whole /64, so
//! counting IPv6 addresses one by one would let it open a connection from each. An IPv4-mapped
//! IPv6 address (`::ffff:192.0.2.1`, a dual-stack socket's view of an IPv4 peer) counts as its
//! IPv4 address.
//!
//! The map holds only clients with an open connection (an entry goes with its last one), so it
//! never has more entries than the listener has connections.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, PoisonError};

/// The open connections of each client address on one listener, and the most one may hold.
#[derive(Debug)]
pub(crate) struct AddressSlots {
    max: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's place in its address's count; given back on drop.
#[derive(Debug)]
pub(crate) struct AddressSlot {
    slots: Arc<AddressSlots>,
    client: IpAddr,
}

impl AddressSlots {
    /// At most `max` open connections per client address.
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(AddressSlots {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a connection from `peer`, or `None` when its address holds the most already.
    pub(crate) fn try_take(self: &Arc<Self>, peer: IpAddr) -> Option<AddressSlot> {
        let client = client_of(peer);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(client).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            slots: Arc::clone(self),
            client,
        })
    }

    /// How many client addresses hold a connection now.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// The address a connection is counted under: IPv4 as is, IPv6 by its /64.
fn client_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let network = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(network))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    #[test]
    fn an_address_holds_at_most_its_share_and_gets_it_back() {
        let slots = AddressSlots::new(2);
        let first = slots.try_take(ip("192.0.2.1")).expect("first");
        let second = slots.try_take(ip("192.0.2.1")).expect("second");
        assert!(slots.try_take(ip("192.0.2.1")).is_none(), "a third is refused");
        assert!(
            slots.try_take(ip("192.0.2.2")).is_some(),
            "another address is not"
        );
        drop(first);
        let third = slots.try_take(ip("192.0.2.1")).expect("a slot came back");
        drop((second, third));
        assert_eq!(slots.clients(), 0, "no entry outlives its connections");
    }

    #[test]
    fn ipv6_counts_by_slash_64_and_mapped_ipv4_as_ipv4() {
        let slots = AddressSlots::new(1);
        let _held = slots.try_take(ip("2001:db8:1:2::1")).expect("first");
        assert!(slots.try_take(ip("2001:db8:1:2:ffff::9")).is_none(), "same /64");
        assert!(slots.try_take(ip("2001:db8:1:3::1")).is_some(), "another /64");
        let _v4 = slots.try_take(ip("198.51.100.7")).expect("ipv4");
        assert!(
            slots.try_take(ip("::ffff:198.51.100.7")).is_none(),
            "mapped is the same client"
        );
    }
}
