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
        "--internal-relay" => Some(super::relay_load::relay_worker_main(rest)),
        "--internal-echo" => Some(super::relay_load::echo_worker_main(rest)),
        "relay-load" => Some(super::relay_load::relay_load_main(rest)),
        "echo-load" => Some(super::relay_load::echo_load_main(rest)),
        "--internal-hotpath" => Some(super::hotpath::hotpath_main(rest)),
        "--internal-memory" => Some(super::hotpath::memory_main(rest)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_command_lines_are_not_worker_modes() {
        let args = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(dispatch(&args(&["bench", "--quick"])).is_none());
        assert!(dispatch(&args(&["bench"])).is_none());
        // A worker mode with bad arguments answers with a usage error, not a panic.
        assert_eq!(
            dispatch(&args(&["bench", "--internal-net-run", "carrier-pigeon"])),
            Some(ExitCode::from(2))
        );
    }
}
