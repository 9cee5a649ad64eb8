//! `tollgate`: the server binary (arguments only; the work is in the library).

fn main() {}
