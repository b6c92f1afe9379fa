//! Logs go to stderr through `tracing`; stdout is reserved for data (tables, `--json`).
//! `RUST_LOG` wins when set; otherwise `-v` raises kforge's level (warn → info → debug → trace).

use tracing_subscriber::EnvFilter;

pub fn init(verbosity: u8, quiet: bool) {
    let level = match (quiet, verbosity) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("warn,kforge={level}")));
    // A second init (tests that call the CLI twice) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
