//! Interoperability with ggml's own RPC server (opt-in: set
//! `STRATA_GGML_RPC_SERVER` to the path of ggml's `ggml-rpc-server`, built
//! from llama-cpp-python 0.3.36's vendored llama.cpp with -DGGML_RPC=ON).
//! strata's client drives ggml's server through the whole conformance suite.

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Killed;

#[test]
fn strata_test_ops_against_ggml_rpc_server() {
    let Ok(server) = std::env::var("STRATA_GGML_RPC_SERVER") else {
        eprintln!("SKIPPED: set STRATA_GGML_RPC_SERVER=/path/to/ggml-rpc-server to run the ggml interop test");
        return;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _srv = Killed(
        Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting ggml's rpc server"),
    );
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "ggml's server did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = common::test_ops(&format!("RPC[127.0.0.1:{port}]"));
    let summary = text.lines().last().unwrap();
    assert_eq!(
        summary,
        format!(
            "{} passed, 0 failed (0 not supported)",
            strata::conformance::cases().len()
        )
    );
}
