//! `fairway pack`: the placement policies on FGD's packing benchmark (openb node and pod
//! lists), as its reference simulator runs it.

use std::path::PathBuf;

use anyhow::Context as _;
use fairway_core::packing::PackPolicy;
use fairway_sim::pack::{self, PackConfig, PackInput};
use fairway_sim::workload::{load_pack_nodes, load_pack_pods};

#[derive(clap::Args)]
pub struct PackArgs {
    /// Node list (openb format: sn, cpu_milli, memory_mib, gpu, model).
    #[arg(long)]
    pub nodes: PathBuf,
    /// Pod list (openb format: name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec;
    /// other columns are ignored and may be empty).
    #[arg(long)]
    pub pods: PathBuf,
    /// Only these policies (comma-separated; default: all).
    #[arg(long, value_delimiter = ',')]
    pub policy: Option<Vec<PackPolicy>>,
    /// Number of seeds (runs per policy), from --first-seed up.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=pack::SEEDS_MAX as i64))]
    pub seeds: u32,
    /// The first seed (the published figures use 42–51).
    #[arg(long, default_value_t = pack::PUBLISHED_FIRST_SEED)]
    pub first_seed: u64,
    /// Resample the pods to this share of the cluster's GPU capacity, in percent.
    #[arg(long, default_value_t = 130, value_parser = clap::value_parser!(u32).range(1..=pack::TARGET_PERCENT_MAX as i64))]
    pub target_percent: u32,
    /// Threads to run on (default: the machine's cores). Results do not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Output on stdout.
    #[arg(long, short = 'o', value_enum, default_value_t = PackOutput::Table)]
    pub output: PackOutput,
    /// Also write `pack.csv` (one row per policy × seed × load level), `pack.json`,
    /// `pack-alloc.svg` and `pack-frag.svg` into this folder.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PackOutput {
    Table,
    Json,
    Csv,
}

pub fn run(args: &PackArgs) -> anyhow::Result<()> {
    let nodes = load_pack_nodes(&args.nodes)?;
    let pods = load_pack_pods(&args.pods)?;
    let input = PackInput::new(nodes, pods)?;
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let config = PackConfig {
        policies: args.policy.clone().unwrap_or_else(|| PackPolicy::ALL.to_vec()),
        seeds: (0..u64::from(args.seeds)).map(|i| args.first_seed + i).collect(),
        target_percent: args.target_percent,
        threads,
    };
    let report = pack::run(&input, &config)?;
    // On stderr, so that stdout and the report files are the same on every run.
    eprintln!(
        "{} runs ({} policies × {} seeds) on {} threads in {:.3} s",
        report.runs.len(),
        config.policies.len(),
        config.seeds.len(),
        threads.min(report.runs.len()),
        report.seconds
    );
    match args.output {
        PackOutput::Table => print!("{}", pack::write_table(&report)),
        PackOutput::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        PackOutput::Csv => print!("{}", pack::write_csv(&report)),
    }
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (alloc, frag) = pack::write_svg(&report).map_err(|e| anyhow::anyhow!("drawing the charts: {e}"))?;
        let files = [
            ("pack.csv", pack::write_csv(&report)),
            ("pack.json", serde_json::to_string_pretty(&report)?),
            ("pack-alloc.svg", alloc),
            ("pack-frag.svg", frag),
        ];
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}
