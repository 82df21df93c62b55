//! netsim: UDP impairment proxy (filled in later in this branch).

fn main() {}
