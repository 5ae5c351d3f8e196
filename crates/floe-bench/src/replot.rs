//! `floe-bench plot`: charts drawn again from saved reports (a run's thread scaling, a growth
//! run's timelines, or speed against space over several reports).

use std::path::PathBuf;

use clap::Args;

use crate::{args::Failure, growth, plot, report, space};

#[derive(Args, Debug)]
pub struct PlotArgs {
    /// A report written by `--json` (or the suite); a growth run's report (`run --workload
    /// population|grow-read`) draws its timelines. With `--space`, several reports (one per
    /// workload, as `run` writes them) are drawn as one chart.
    #[arg(required = true, num_args = 1..)]
    pub json: Vec<PathBuf>,
    /// The SVG to write.
    #[arg(long)]
    pub out: PathBuf,
    /// The chart's title [default: the report's command].
    #[arg(long)]
    pub title: Option<String>,
    /// Draw speed against space instead (`space.rs`: bytes per key across, Mops/s up, a point
    /// per map at each workload's largest thread count) from a `run --memory on` report.
    #[arg(long)]
    pub space: bool,
}

pub fn main(args: PlotArgs) -> Result<(), Failure> {
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path)
            .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))
    };
    let parse = |path: &PathBuf, text: &str| {
        report::Report::from_json(text)
            .map_err(|e| Failure::Usage(format!("{}: {e}", path.display())))
    };
    if args.space {
        // One chart of every report's rows (one report per workload).
        let mut reports = Vec::new();
        for path in &args.json {
            reports.push(parse(path, &read(path)?)?);
        }
        let mut merged = reports.remove(0);
        for other in reports {
            merged.results.extend(other.results);
            merged.command = format!("{}; {}", merged.command, other.command);
        }
        let title = args.title.unwrap_or_else(|| merged.command.clone());
        let chart = space::svg(&merged, &title).ok_or_else(|| {
            Failure::Usage("no result has bytes per key (measure with `run --memory on`)".into())
        })?;
        report::write_file(&args.out, &chart).map_err(Failure::Run)?;
        println!("wrote {}", args.out.display());
        return Ok(());
    }
    let [path] = args.json.as_slice() else {
        return Err(Failure::Usage(
            "one report at a time, except with --space".into(),
        ));
    };
    let text = read(path)?;
    // A growth run's report (population, grow-read) draws its timelines.
    if let Ok(growth) = serde_json::from_str::<growth::Report>(&text) {
        if growth.envelope.schema == growth::SCHEMA {
            let title = args.title.unwrap_or_else(|| growth::title(&growth));
            report::write_file(&args.out, &growth::svg(&growth, &title)).map_err(Failure::Run)?;
            println!("wrote {}", args.out.display());
            return Ok(());
        }
    }
    let report = parse(path, &text)?;
    let title = args.title.unwrap_or_else(|| report.command.clone());
    report::write_file(&args.out, &plot::svg(&report, &title)).map_err(Failure::Run)?;
    println!("wrote {}", args.out.display());
    Ok(())
}
