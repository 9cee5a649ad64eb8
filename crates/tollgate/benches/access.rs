//! Nanoseconds per allow/deny list lookup ([`AccessLists::lookup`]), which the engine makes for
//! every rule of every request once any entry is listed.
//!
//! Each bench id reads `access/{entries}/{key}`:
//!
//! - `entries`: `10`, `1k` or `100k` entries split evenly over exact keys, key prefixes, IPv4
//!   ranges and IPv6 ranges, half global and half on the policy looked up, allow and deny
//!   alternating. Ranges are `/24` (IPv4) and `/48` (IPv6) blocks spread over the space.
//! - `key`: `ipv4_hit` (an address inside a listed range), `ipv4_miss`, `ipv6_hit`,
//!   `key_miss` (a 24-byte key that is not an address and matches no key nor prefix: the common
//!   case of a list that names a few clients) and `prefix_hit`.
//!
//! Run with `cargo bench -p tollgate --bench access`; add `--warm-up-time 1 --measurement-time 2`
//! for a quicker run.

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};

use criterion::{Criterion, criterion_group, criterion_main};
use tollgate::access::{AccessEntry, AccessLists, EntryKind, Listed};

fn lists(entries: usize) -> AccessLists {
    let per_kind = entries / 4;
    let mut all = Vec::with_capacity(entries);
    for i in 0..per_kind {
        let policy = (i % 2 == 0).then_some("api");
        let list = if i % 4 < 2 { Listed::Allow } else { Listed::Deny };
        let add = |kind, value: String| AccessEntry::new(policy, list, kind, &value).expect("valid");
        all.push(add(EntryKind::Key, format!("tenant-{i:08}")));
        all.push(add(EntryKind::Prefix, format!("svc-{i:06}:")));
        // Spread /24 blocks: i * 97 mod 2^24 distinct for i < 2^24.
        let block = (i as u32).wrapping_mul(97) & 0x00ff_ffff;
        all.push(add(EntryKind::Cidr, format!("{}/24", Ipv4Addr::from(block << 8))));
        let v6 = (0x2001_0db8_u128 << 96) | ((i as u128) << 80);
        all.push(add(EntryKind::Cidr, format!("{}/48", Ipv6Addr::from(v6))));
    }
    AccessLists::new(all)
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("access");
    for (label, entries) in [("10", 12), ("1k", 1_000), ("100k", 100_000)] {
        let lists = lists(entries);
        let middle = entries / 8;
        let ipv4_hit =
            Ipv4Addr::from((((middle as u32).wrapping_mul(97) & 0x00ff_ffff) << 8) | 7).to_string();
        let ipv6_hit = Ipv6Addr::from((0x2001_0db8_u128 << 96) | ((middle as u128) << 80) | 9).to_string();
        let prefix_hit = format!("svc-{middle:06}:orders");
        let keys = [
            ("ipv4_hit", ipv4_hit),
            ("ipv4_miss", "255.255.255.254".to_owned()),
            ("ipv6_hit", ipv6_hit),
            ("key_miss", "customer-7f3a9c2e11b04d5a".to_owned()),
            ("prefix_hit", prefix_hit),
        ];
        for (name, key) in &keys {
            let hit = lists.lookup("api", key.as_bytes()).is_some();
            assert_eq!(hit, name.ends_with("hit"), "{label}/{name}: {key}");
            group.bench_function(format!("{label}/{name}"), |b| {
                b.iter(|| black_box(lists.lookup(black_box("api"), black_box(key.as_bytes()))).is_some())
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
