//! `cutesmith report PATH...`: Markdown and a self-contained HTML page over sessions
//! ([`crate::report`]).

use std::path::PathBuf;

use clap::Args;

use super::EXIT_OK;
use crate::error::Result;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Session directories, or directories holding sessions (e.g. runs/).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Where report.md, report.html and the SVG charts go.
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
}

pub fn cmd_report(args: ReportArgs) -> Result<i32> {
    let rows = crate::report::load(&args.paths)?;
    let html = crate::report::write(&rows, &args.out)?;
    println!(
        "wrote {} and {} ({} sessions)",
        args.out.join("report.md").display(),
        html.display(),
        rows.len()
    );
    Ok(EXIT_OK)
}
