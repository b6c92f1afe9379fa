//! The `kforge` binary: parses the command line and hands over to [`kforge::cli`].

fn main() -> std::process::ExitCode {
    kforge::cli::main()
}
