//! A bot and a password guesser against the embedded store, on a simulated clock.
//!
//! The bot asks for a movie list every 2 s for 2 minutes against a limit of 20 per minute; each
//! algorithm shows when it starts denying and how long it tells the bot to wait. Then a script
//! guesses a password until the attempts counter locks the account.
//!
//! Run with `cargo run --release -p tollgate --example quickstart`.

use std::time::Duration;

use tollgate::{Algorithm, Anchor, Error, ManualClock, MemoryStore, Policy, Rate};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let minute = Duration::from_secs(60);
    let algorithms = [
        Algorithm::fixed_window(20, minute, Anchor::Epoch)?,
        Algorithm::sliding_log(20, minute)?,
        Algorithm::sliding_window(20, minute)?,
        Algorithm::token_bucket(20, Rate::per_minute(20)?)?,
        Algorithm::leaky_bucket(20, Rate::per_minute(20)?)?,
        Algorithm::gcra(Rate::per_minute(20)?, 20)?,
    ];
    println!("A bot requests GET /v4/movies every 2 s for 2 minutes; the limit is 20 per minute.\n");
    println!("| algorithm | admitted | denied | first denial at | retry_after then |");
    println!("|---|---|---|---|---|");
    for algorithm in algorithms {
        bot(Policy::new("movies", algorithm)?)?;
    }
    println!();
    brute_force()?;
    Ok(())
}

fn bot(policy: Policy) -> Result<(), Error> {
    // Start on a minute boundary, as a wall clock would at :00.
    let clock = ManualClock::new(1_700_000_040_000_000);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let (mut admitted, mut denied, mut first_denial) = (0, 0, None);
    for request in 0..60u64 {
        let decision = store.check(&policy, "203.0.113.9", 1)?;
        if decision.allowed {
            admitted += 1;
        } else {
            denied += 1;
            first_denial.get_or_insert((request * 2, decision.retry_after.unwrap_or_default()));
        }
        clock.advance(Duration::from_secs(2));
    }
    let (at, retry) = first_denial.map_or(("-".into(), "-".into()), |(at, retry)| {
        (format!("{at} s"), format!("{:.1} s", retry.as_secs_f64()))
    });
    println!(
        "| {} | {admitted} | {denied} | {at} | {retry} |",
        policy.algorithm().name()
    );
    Ok(())
}

fn brute_force() -> Result<(), Error> {
    let clock = ManualClock::new(1_700_000_040_000_000);
    let store = MemoryStore::builder().clock(clock.clone()).build();
    let account = "login:alice";
    let hour = Duration::from_secs(3600);
    println!("A script guesses alice's password every 10 s; 5 failures within an hour lock the account.");
    for guess in 1..=8 {
        let status = store.check_limit(account, 5)?;
        if !status.allowed {
            let wait = status.ttl.unwrap_or_default().as_secs();
            println!("guess {guess}: refused before checking the password, retry in {wait} s");
        } else {
            let failures = store.increment_attempts(account, hour)?;
            println!("guess {guess}: wrong password, failure {failures} of 5");
        }
        clock.advance(Duration::from_secs(10));
    }
    store.reset_attempts(account)?;
    println!(
        "after a successful login (or an admin reset) the counter is gone: {}",
        store.get_attempts(account)?
    );
    Ok(())
}
