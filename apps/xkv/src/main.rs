//! `pmkit-xkv`: the key-value store served on 127.0.0.1 over memcached's text protocol.

use clap::Parser;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    version,
    about = "xkv: a MemC3-like key-value store on X-Mem, served over memcached's text protocol"
)]
struct Cli {
    #[command(flatten)]
    serve: pmkit_xkv::server::ServeArgs,
}

fn main() -> ExitCode {
    match pmkit_xkv::server::serve(Cli::parse().serve) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pmkit-xkv: {e:#}");
            ExitCode::FAILURE
        }
    }
}
