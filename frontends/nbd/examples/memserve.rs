//! Serve a DRAM-backed export, for trying clients and comparing execution models without a PM
//! device: `cargo run --release -p pmkit-nbd --example memserve -- SOCKET [SIZE_MIB] [inline|threaded:N]`.

use pmkit_nbd::{BlockSizes, IoModel, Listen, MemBackend, Server, ServerConfig};
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sock = args
        .get(1)
        .expect("usage: memserve SOCKET [SIZE_MIB] [inline|threaded:N]");
    let mib: u64 = args
        .get(2)
        .map(|s| s.parse().expect("size in MiB"))
        .unwrap_or(256);
    let io_model = match args.get(3).map(String::as_str) {
        None | Some("inline") => IoModel::Inline,
        Some(s) => IoModel::Threaded {
            workers: s
                .strip_prefix("threaded:")
                .and_then(|n| n.parse().ok())
                .expect("inline or threaded:N"),
        },
    };
    let dev = Arc::new(MemBackend::new(
        mib << 20,
        BlockSizes {
            minimum: 512,
            preferred: 4096,
        },
        false,
    ));
    let server = Server::bind(
        &Listen::Unix(sock.into()),
        dev,
        ServerConfig {
            io_model,
            ..Default::default()
        },
    )
    .expect("bind");
    println!("{}", server.uri());
    // Runs until killed; with a line on stdin (or stdin closed) it shuts down in order.
    let h = server.shutdown_handle();
    if std::env::var_os("MEMSERVE_STDIN_STOP").is_some() {
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            h.shutdown();
        });
    }
    let stats = server.run().expect("serve");
    eprintln!("{stats:?}");
}
