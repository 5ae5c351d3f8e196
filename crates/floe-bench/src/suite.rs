//! The default suite (`floe-bench` with no subcommand, or `floe-bench suite`): get, insdel and
//! putheavy at all cores, floe in both layouts one at a time and batched beside the peers,
//! written to `results/<timestamp>.json` and `.svg`.

use std::path::PathBuf;

use clap::Args;
use floe::Backend;

use crate::{
    args::{BackendArg, Common, Failure},
    bars,
    experiment::MapEntry,
    keys,
    maps::MapKind,
    measure::Workers,
    report,
    run::{experiment, measure_and_report},
    workload::Workload,
};

#[derive(Args, Debug)]
pub struct SuiteArgs {
    #[command(flatten)]
    pub common: Common,
    /// Directory for `<timestamp>.json` and `<timestamp>.svg` (unless --json/--plot are given).
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

pub fn main(args: SuiteArgs) -> Result<(), Failure> {
    let mut experiment = experiment(&args.common, 1.0, false)?;
    experiment.workloads = vec![Workload::Get, Workload::Insdel, Workload::Putheavy];
    // What floe is for, at a glance: at all cores, floe one operation at a time and batched,
    // in both layouts, beside the peers one at a time (they have no batches).
    if args.common.threads.is_empty() {
        experiment.threads = vec![Workers::new().cores()];
    }
    if args.common.maps.is_empty() && args.common.backend == [BackendArg::Auto] {
        let depth = floe::batch::DEFAULT_DEPTH;
        let floe = MapEntry::new(MapKind::Floe, "floe", Backend::Auto);
        let dense = MapEntry::new(MapKind::FloeDense, "floe-dense", Backend::Auto);
        let mut maps = vec![
            floe.clone(),
            floe.batched("floe batched", depth),
            dense.clone(),
            dense.batched("floe-dense batched", depth),
        ];
        maps.extend(
            experiment
                .maps
                .iter()
                .filter(|m| !m.kind.is_floe())
                .cloned(),
        );
        experiment.maps = maps;
    }
    let stamp = report::file_stamp();
    let outputs = (
        args.out.join(format!("{stamp}.json")),
        args.out.join(format!("{stamp}.svg")),
    );
    let title = format!(
        "floe-bench suite: {} keys, uniform, one at a time and batched",
        keys::pretty_count(experiment.keys)
    );
    measure_and_report(&experiment, &args.common, Some(outputs), &title, bars::svg)
}
