//! The `cutesmith` binary: parse flags, run, exit with the documented code.

use clap::Parser;

fn main() {
    // Behave like a Unix tool when the reader goes away (`cutesmith ... | head`): end
    // quietly instead of panicking on a broken pipe.
    // SAFETY: restoring the default disposition of one signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = cutesmith::cli::Cli::parse();
    std::process::exit(cutesmith::cli::run(cli));
}
