//! The seeds' scheduler experiment on the first GPU: A and B live in the
//! GPU's memory, C and D in a CPU buffer; the graph is mul_mat(A, B) + C + D.
//!
//! * C/D's buffer marked WEIGHTS: the adds are pulled to the CPU → 2 splits.
//! * Unmarked: everything stays on the GPU, C and D are copied → 1 split.
//!
//! Run: `cargo run --release -p strata-gpu --example sched_priority`

use strata::sched::experiment;
use strata::Result;

fn main() -> Result<()> {
    let dev = match strata_gpu::first_device() {
        Ok(d) => d,
        Err(why) => {
            eprintln!("{why}");
            std::process::exit(2);
        }
    };
    println!(
        "device {}: {}",
        dev.context().name(),
        strata::backend::Device::description(dev.as_ref())
    );
    experiment::print_both(|| Ok(Box::new(dev.backend())))
}

#[cfg(test)]
mod tests {
    use strata::sched::experiment::{expected, run};

    #[test]
    fn weights_mark_decides_the_split_count() {
        let Some(dev) = strata_gpu::device_or_skip().unwrap() else {
            return;
        };
        let name = dev.context().name().to_string();
        let marked = run(Box::new(dev.backend()), true).unwrap();
        assert_eq!(marked.splits, 2, "{}", marked.report);
        let on: Vec<&str> = marked.placement.iter().map(|p| p.1.as_str()).collect();
        assert_eq!(on, [name.as_str(), "CPU", "CPU"]);
        assert_eq!(marked.result, expected());
        let unmarked = run(Box::new(dev.backend()), false).unwrap();
        assert_eq!(unmarked.splits, 1, "{}", unmarked.report);
        assert!(unmarked.placement.iter().all(|p| p.1 == name));
        assert_eq!(unmarked.result, expected());
        assert!(unmarked.report.contains("2 inputs"), "{}", unmarked.report);
    }
}
