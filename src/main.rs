use std::io::Write as _;

use clap::Parser;

fn main() -> std::process::ExitCode {
    gpu_sentinel::cli::logging::init();
    let cli = gpu_sentinel::cli::Cli::parse();
    if !cli.is_run() {
        gpu_sentinel::cli::output::end_quietly_on_closed_pipe();
    }
    match gpu_sentinel::cli::dispatch(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Not `eprintln!`: with standard error closed it would panic (exit 101). Scrubbed
            // like every log line: an error may quote a receiver's URL.
            let message = gpu_sentinel::redact::scrub(&format!("{e:#}"));
            let _ = writeln!(std::io::stderr(), "error: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
