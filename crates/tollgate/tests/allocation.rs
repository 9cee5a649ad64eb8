//! Deciding one rule allocates nothing once its key is stored: not in the memory store, not in
//! the engine around it. Counted with a global allocator that tallies this thread's allocations.

// A global allocator can only be written with `unsafe`; it forwards to the system allocator.
#![allow(unsafe_code)]
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use tollgate::{Algorithm, Engine, MemoryStore, Policy, Rate, Rule};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

fn now<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("memory store futures are ready at once"),
    }
}

#[test]
fn one_rule_allocates_nothing_once_its_key_is_stored() {
    let engine = Engine::new(MemoryStore::new());
    let policy = Policy::new(
        "api",
        Algorithm::gcra(Rate::per_second(1_000).unwrap(), 1_000).unwrap(),
    )
    .unwrap();
    let key = b"203.0.113.200";
    now(engine.check(&policy, key, 1)).unwrap();
    let n = allocations_during(|| {
        for _ in 0..100 {
            let verdict = now(engine.check_all(&[Rule::new(&policy, key, 1)])).unwrap();
            assert!(verdict.allowed());
            assert!(engine.store().check(&policy, key, 1).unwrap().allowed);
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn several_rules_do_allocate_so_the_count_can_fail() {
    let engine = Engine::new(MemoryStore::new());
    let a = Policy::new(
        "a",
        Algorithm::gcra(Rate::per_second(1_000).unwrap(), 1_000).unwrap(),
    )
    .unwrap();
    let b = Policy::new(
        "b",
        Algorithm::gcra(Rate::per_second(1_000).unwrap(), 1_000).unwrap(),
    )
    .unwrap();
    let rules = [Rule::new(&a, "k", 1), Rule::new(&b, "k", 1)];
    now(engine.check_all(&rules)).unwrap();
    assert!(allocations_during(|| drop(now(engine.check_all(&rules)).unwrap())) > 0);
}
