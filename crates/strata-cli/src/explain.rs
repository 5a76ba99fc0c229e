//! `strata explain`: how the scheduler places an example graph, or a
//! model's worst-case graph (`-m MODEL [-ngl N] [-ot RE=DEV] [--cpu-moe]`), as text, JSON or
//! Graphviz DOT.

use strata::backend::{alloc_tensors, Backend, BufferUsage};
use strata::cpu::{cpu_buffer_type, CpuBackend};
use strata::sched::{SchedConfig, Scheduler};
use strata::testkit::TestBackend;
use strata::{ops, DType, Graph, Tensor};

/// Arguments of `strata explain`.
#[derive(clap::Args)]
pub struct Args {
    /// Example graph: `seed` (the seeds' mul_mat + 2 adds, C/D unmarked) or
    /// `seed-weights` (C/D in a WEIGHTS buffer).
    #[arg(long, default_value = "seed-weights")]
    pub graph: String,
    /// Device to pair with the CPU (default: a simulated device, `FAKE0`).
    #[arg(long)]
    pub device: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Print Graphviz DOT (splits as clusters).
    #[arg(long)]
    pub dot: bool,
    /// Also print every node with backend, cause and sources.
    #[arg(long, short)]
    pub verbose: bool,
    /// Explain this model's graph (a full batch over the whole context) instead.
    #[arg(short = 'm', long)]
    pub model: Option<std::path::PathBuf>,
    /// With -m: layers to offload to --device (default device: the simulated FAKE0).
    #[arg(long = "ngl", default_value_t = 0, allow_negative_numbers = true)]
    pub ngl: i32,
    /// With -m: context size.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 2048)]
    pub ctx_size: usize,
    /// With -m: batch size.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    pub batch_size: usize,
    /// With -m: SOFT_MAX attention instead of FLASH_ATTN_EXT.
    #[arg(long)]
    pub no_flash_attn: bool,
    /// With -m: tensor placement overrides, as for `strata run`.
    #[command(flatten)]
    pub place: crate::common::OverrideArgs,
}

fn print(report: &strata::sched::Report, a: &Args) {
    if a.json {
        println!("{}", report.to_json());
    } else if a.dot {
        print!("{}", report.to_dot());
    } else {
        print!("{}", report.to_text(a.verbose));
    }
}

fn explain_model(a: &Args, path: &std::path::Path) -> crate::common::CliResult {
    let device = a
        .device
        .clone()
        .or_else(|| (a.ngl != 0 || !a.place.ot.is_empty()).then(|| "FAKE0".to_string()));
    let margs = crate::common::ModelArgs {
        model: Some(path.to_path_buf()),
        threads: vec![strata::cpu::default_threads()],
        poll: strata::cpu::default_poll(),
        ctx_size: a.ctx_size,
        batch_size: a.batch_size,
        ubatch_size: a.batch_size,
        n_parallel: 1,
        ngl: a.ngl,
        tensor_split: Vec::new(),
        split_mode: Default::default(),
        main_gpu: 0,
        device: device.into_iter().collect(),
        rpc: Vec::new(),
        place: a.place.clone(),
        no_flash_attn: a.no_flash_attn,
        no_repack: false,
    };
    let model = margs.load()?;
    let mut ctx = margs.context(model, false)?;
    let report = ctx.report()?;
    print(&report, a);
    if !a.json && !a.dot {
        let names = ctx.model().devices.names();
        for (n, b) in names.iter().zip(ctx.compute_buffer_sizes()) {
            println!("compute buffer {n}: {:.2} MiB", b as f64 / 1048576.0);
        }
        println!("KV cache: {:.2} MiB", ctx.kv_bytes() as f64 / 1048576.0);
    }
    Ok(0)
}

/// Prints the report; exit code 0.
pub fn run(a: Args) -> crate::common::CliResult {
    if let Some(path) = a.model.clone() {
        return explain_model(&a, &path);
    }
    let cpu_weights = match a.graph.as_str() {
        "seed" => false,
        "seed-weights" => true,
        g => {
            return Err(strata::Error::BadValue {
                arg: "--graph (example graph)".into(),
                value: format!("'{g}'"),
                expected: "seed or seed-weights".into(),
            }
            .into())
        }
    };
    let dev: Box<dyn Backend> = match &a.device {
        Some(name) => crate::test_ops::registry().backend(name)?,
        None => Box::new(TestBackend::device("FAKE0", |_| true, 1)),
    };
    let a_t = Tensor::new(DType::F32, &[2, 4])?.with_name("a");
    let b_t = Tensor::new(DType::F32, &[2, 3])?.with_name("b");
    let c = Tensor::new(DType::F32, &[4, 3])?.with_name("c");
    let d = Tensor::new(DType::F32, &[4, 3])?.with_name("d");
    let ab = alloc_tensors(&[a_t.clone(), b_t.clone()], &dev.default_buffer_type())?;
    ab[0].set_usage(BufferUsage::Weights);
    let cd = alloc_tensors(&[c.clone(), d.clone()], &cpu_buffer_type())?;
    if cpu_weights {
        cd[0].set_usage(BufferUsage::Weights);
    }
    let mm = ops::mul_mat(&a_t, &b_t)?.with_name("mul_mat_0");
    let add0 = ops::add(&mm, &c)?.with_name("add_0");
    let add1 = ops::add(&add0, &d)?.with_name("add_1");
    add1.set_output();
    let g = Graph::build(&[add1]);
    let backends: Vec<Box<dyn Backend>> = vec![dev, Box::new(CpuBackend::new(1))];
    let mut sched = Scheduler::new(
        backends,
        None,
        SchedConfig {
            debug: 0,
            ..SchedConfig::default()
        },
    )?;
    sched.reserve(&g)?;
    let report = sched.report_for(&g)?;
    print(&report, &a);
    Ok(0)
}
