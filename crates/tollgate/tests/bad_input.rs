//! Bad input gets a typed error, never a panic; odd keys are handled and never collide.

use std::time::Duration;

use tollgate::bounds::{MAX_KEY_LEN, MAX_LIMIT, MAX_LOG_LIMIT, MAX_PERIOD};
use tollgate::{Algorithm, Anchor, Error, ManualClock, MemoryStore, Policy, PolicyError, Rate};

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn zero_and_oversized_counts_are_rejected() {
    assert_eq!(
        Algorithm::fixed_window(0, MINUTE, Anchor::Epoch),
        Err(PolicyError::Zero { field: "limit" })
    );
    assert!(matches!(
        Algorithm::sliding_window(MAX_LIMIT + 1, MINUTE),
        Err(PolicyError::TooLarge { field: "limit", .. })
    ));
    assert!(matches!(
        Algorithm::sliding_log(MAX_LOG_LIMIT + 1, MINUTE),
        Err(PolicyError::TooLarge { .. })
    ));
    assert!(matches!(
        Rate::per_second(0),
        Err(PolicyError::Zero { field: "rate" })
    ));
    assert!(matches!(
        Algorithm::gcra(Rate::per_second(1).unwrap(), 0),
        Err(PolicyError::Zero { field: "burst" })
    ));
    assert!(matches!(
        Algorithm::token_bucket(u64::MAX, Rate::per_second(1).unwrap()),
        Err(PolicyError::TooLarge { .. })
    ));
}

#[test]
fn durations_outside_one_millisecond_to_a_thousand_days_are_rejected() {
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        MAX_PERIOD + Duration::from_secs(1),
        Duration::MAX,
    ] {
        assert!(
            matches!(
                Algorithm::sliding_log(1, bad),
                Err(PolicyError::DurationOutOfRange { field: "window", .. })
            ),
            "{bad:?}"
        );
        assert!(Rate::new(1, bad).is_err());
        let policy = Policy::new("p", Algorithm::sliding_log(1, MINUTE).unwrap()).unwrap();
        assert!(policy.with_block_for(bad).is_err());
    }
    assert!(Algorithm::sliding_window(1, Duration::from_secs(400 * 86_400)).is_ok());
}

#[test]
fn rates_finer_than_a_microsecond_and_endless_refills_are_rejected() {
    assert!(matches!(
        Rate::new(2_000, Duration::from_millis(1)),
        Err(PolicyError::RateTooFine { .. })
    ));
    let yearly = Rate::new(1, Duration::from_secs(365 * 86_400)).unwrap();
    assert!(matches!(
        Algorithm::gcra(yearly, 10),
        Err(PolicyError::HorizonTooLong { field: "burst", .. })
    ));
    assert!(Algorithm::leaky_bucket(2, yearly).is_ok());
}

#[test]
fn policy_names_must_fit() {
    let algorithm = Algorithm::sliding_log(1, MINUTE).unwrap();
    assert!(matches!(
        Policy::new("", algorithm.clone()),
        Err(PolicyError::BadName { len: 0, .. })
    ));
    assert!(Policy::new("x".repeat(256), algorithm.clone()).is_err());
    assert!(Policy::new("x".repeat(255), algorithm).is_ok());
}

#[test]
fn errors_read_well() {
    let err = Algorithm::sliding_log(0, MINUTE).unwrap_err();
    assert_eq!(err.to_string(), "limit must be at least 1");
    let policy = Policy::new("login", Algorithm::sliding_log(5, MINUTE).unwrap()).unwrap();
    let store = MemoryStore::new();
    let err = store.check(&policy, "k", 6).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cost 6 is above 5, the most policy `login` can ever admit at once"
    );
    assert!(err.is_bad_input());
}

#[test]
fn costs_of_zero_or_above_the_limit_are_errors_not_eternal_denials() {
    let store = MemoryStore::new();
    let policy = Policy::new(
        "p",
        Algorithm::token_bucket(10, Rate::per_second(1).unwrap()).unwrap(),
    )
    .unwrap();
    assert!(matches!(store.check(&policy, "k", 0), Err(Error::ZeroCost)));
    assert!(matches!(
        store.peek(&policy, "k", 11),
        Err(Error::CostTooLarge {
            cost: 11,
            max: 10,
            ..
        })
    ));
    assert!(matches!(
        store.check(&policy, "k", u64::MAX),
        Err(Error::CostTooLarge { .. })
    ));
    assert!(store.check(&policy, "k", 10).unwrap().allowed);
}

#[test]
fn empty_and_overlong_keys_are_rejected() {
    let store = MemoryStore::new();
    let policy = Policy::new("p", Algorithm::sliding_log(1, MINUTE).unwrap()).unwrap();
    assert!(matches!(store.check(&policy, "", 1), Err(Error::EmptyKey)));
    assert!(matches!(store.reset(&policy, ""), Err(Error::EmptyKey)));
    let long = vec![b'k'; MAX_KEY_LEN + 1];
    assert!(matches!(
        store.check(&policy, &long, 1),
        Err(Error::KeyTooLong { .. })
    ));
    assert!(store.is_empty(), "nothing was stored for rejected input");
}

#[test]
fn any_bytes_make_a_key_and_different_keys_never_collide() {
    let store = MemoryStore::builder().clock(ManualClock::new(1_000_000)).build();
    let keys: Vec<Vec<u8>> = vec![
        b"a:b".to_vec(),
        b"a".to_vec(),
        b"b".to_vec(),
        b"{tag}".to_vec(),
        b"{tag".to_vec(),
        b"tag}".to_vec(),
        b"with space".to_vec(),
        b"with\nnewline".to_vec(),
        b"\xff\xfe invalid utf-8".to_vec(),
        b"\0".to_vec(),
        b"\0\0".to_vec(),
        vec![b'x'; 4096],
        vec![b'x'; 4095],
    ];
    let policy = Policy::new("p", Algorithm::sliding_log(1, MINUTE).unwrap()).unwrap();
    for key in &keys {
        assert!(store.check(&policy, key, 1).unwrap().allowed, "{key:?} collided");
    }
    for key in &keys {
        assert!(
            !store.check(&policy, key, 1).unwrap().allowed,
            "{key:?} was not recorded"
        );
    }
    // A policy name and a key can not be re-split into another pair.
    let ab = Policy::new("a:b", Algorithm::sliding_log(1, MINUTE).unwrap()).unwrap();
    let a = Policy::new("a", Algorithm::sliding_log(1, MINUTE).unwrap()).unwrap();
    assert!(store.check(&ab, "c", 1).unwrap().allowed);
    assert!(store.check(&a, "b:c", 1).unwrap().allowed);
    assert!(store.check(&a, ":b:c", 1).unwrap().allowed);
    // Attempts counters live apart from every policy.
    assert_eq!(store.get_attempts("c").unwrap(), 0);
}
