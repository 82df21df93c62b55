//! The benchmark harness behind `cargo run --profile dist -p lockstep-tests --bin bench`:
//! statistics, plots, machine stamps, and the sections of `BENCHMARKS.md`.

pub mod bandwidth_bench;
pub mod benchpeer;
pub mod big_bench;
pub mod big_procs;
pub mod bulk_bench;
pub mod carrier;
pub mod crowd_bench;
pub mod crypto_bench;
pub mod framing;
pub mod hotpath;
pub mod internal;
pub mod latency_bench;
pub mod live_view_bench;
pub mod machine;
pub mod net_bench;
pub mod net_figures;
pub mod net_report;
pub mod netns;
pub mod proxy;
pub mod rejoin_bench;
pub mod relay_bench;
pub mod relay_load;
pub mod relay_procs;
pub mod relay_report;
pub mod replay_bench;
pub mod report;
pub mod restart_bench;
pub mod scenario_game;
pub mod sim_bench;
pub mod speculation_bench;
pub mod stats;
pub mod svg;
pub mod udp_loop;
pub mod viewer_bench;
