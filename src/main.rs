use std::io::Write as _;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // A line that cannot be written (standard error closed) is dropped: by default the
        // subscriber reports that with `eprintln!`, which panics the logging thread.
        .log_internal_errors(false)
        .init();
    let cli = gpu_sentinel::cli::Cli::parse();
    if !cli.is_run() {
        gpu_sentinel::cli::output::end_quietly_on_closed_pipe();
    }
    match gpu_sentinel::cli::dispatch(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Not `eprintln!`: with standard error closed it would panic (exit 101).
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
