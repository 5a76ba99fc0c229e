//! The seeds' scheduler experiment on a real remote device: a strata RPC
//! server on a loopback port plays the GPU. A and B live in the device's
//! memory, C and D in a CPU buffer; the graph is mul_mat(A, B) + C + D.
//!
//! * C/D's buffer marked WEIGHTS: the adds are pulled to the CPU → 2 splits.
//! * Unmarked: everything stays on the device, C and D are copied → 1 split.
//!
//! Run: `cargo run --release -p strata-rpc --example sched_priority`

use std::sync::Arc;

use strata::backend::Registry;
use strata::sched::experiment;
use strata::Result;
use strata_rpc::server::spawn_loopback_cpu;
use strata_rpc::RpcProvider;

fn main() -> Result<()> {
    let (addr, _server) = spawn_loopback_cpu(1)?;
    let mut reg = Registry::with_defaults();
    reg.register(Arc::new(RpcProvider::new()));
    let device = format!("RPC[{addr}]");
    experiment::print_both(|| reg.backend(&device))
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata::sched::experiment::expected;

    #[test]
    fn weights_mark_decides_the_split_count() {
        let (addr, _server) = spawn_loopback_cpu(2).unwrap();
        let mut reg = Registry::with_defaults();
        reg.register(Arc::new(RpcProvider::new()));
        let device = format!("RPC[{addr}]");
        let marked = experiment::run(reg.backend(&device).unwrap(), true).unwrap();
        assert_eq!(marked.splits, 2);
        let on: Vec<&str> = marked.placement.iter().map(|p| p.1.as_str()).collect();
        assert_eq!(on, [device.as_str(), "CPU", "CPU"]);
        assert_eq!(marked.placement[1].2, "1.wgt1");
        assert_eq!(marked.result, expected());
        let unmarked = experiment::run(reg.backend(&device).unwrap(), false).unwrap();
        assert_eq!(unmarked.splits, 1);
        assert!(unmarked.placement.iter().all(|p| p.1 == device));
        assert_eq!(unmarked.result, expected());
        assert!(
            unmarked.report.contains("2 inputs"),
            "C and D are copied:\n{}",
            unmarked.report
        );
    }
}
