use clap::Parser;

fn main() -> std::process::ExitCode {
    gpu_sentinel::cli::logging::init();
    let cli = gpu_sentinel::cli::Cli::parse();
    match gpu_sentinel::cli::dispatch(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
