use std::io::Write as _;

use clap::Parser;

/// Runs before `main` and before Rust's runtime hides a closed standard output behind
/// `/dev/null` (see `cli::output::note_closed_stdout`). `.init_array` entries are run by
/// the C runtime (glibc and musl) at program start.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_STDOUT: extern "C" fn() = gpu_sentinel::cli::output::note_closed_stdout;

fn main() -> std::process::ExitCode {
    gpu_sentinel::cli::logging::init();
    let cli = gpu_sentinel::cli::Cli::parse();
    if !cli.is_run() {
        gpu_sentinel::cli::output::end_quietly_on_closed_pipe();
    }
    match gpu_sentinel::cli::dispatch(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // A status the command chose (`health`), its output already written.
        Err(e) if e.downcast_ref::<gpu_sentinel::cli::Exit>().is_some() => {
            let code = e
                .downcast_ref::<gpu_sentinel::cli::Exit>()
                .map_or(1, |x| x.0);
            std::process::ExitCode::from(code)
        }
        Err(e) => {
            // Not `eprintln!`: with standard error closed it would panic (exit 101). Scrubbed
            // like every log line: an error may quote a receiver's URL.
            let message = gpu_sentinel::redact::scrub(&format!("{e:#}"));
            let _ = writeln!(std::io::stderr(), "error: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}
