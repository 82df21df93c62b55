//! Hidden worker modes of the `bench` binary: the net section runs each match
//! as a child process inside a network namespace, and the relay section runs
//! the relay and the load generator as separate processes.

use std::process::ExitCode;

/// Runs a worker mode if `args` (the full command line) asks for one.
#[must_use]
pub fn dispatch(args: &[String]) -> Option<ExitCode> {
    let mode = args.get(1)?;
    let rest = args.get(2..).unwrap_or(&[]);
    match mode.as_str() {
        "--internal-net-run" => Some(super::net_bench::internal_main(rest)),
        "--internal-relay" => Some(super::relay_bench::relay_main()),
        "--internal-loadgen" => Some(super::relay_bench::loadgen_main(rest)),
        _ => None,
    }
}
