//! The `cutesmith` binary: parse flags, run, exit with the documented code.

use clap::Parser;

fn main() {
    let cli = cutesmith::cli::Cli::parse();
    std::process::exit(cutesmith::cli::run(cli));
}
