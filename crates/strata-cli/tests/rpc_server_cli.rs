//! `strata rpc-server` as a user runs it: a real process on a loopback
//! port, driven by strata's RPC client, then killed.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::Killed;
use strata::backend::{alloc_graph, Registry};
use strata::{ops, DType, Graph, Tensor};

fn start(args: &[&str]) -> (Killed, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("rpc-server")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    for l in out.lines() {
        let l = l.unwrap();
        let done = l.contains("transport");
        lines.push(l);
        if done {
            break;
        }
    }
    (Killed(child), lines)
}

fn endpoint(lines: &[String]) -> String {
    lines
        .iter()
        .find_map(|l| l.split("endpoint       : ").nth(1))
        .expect("endpoint line")
        .trim()
        .to_string()
}

#[test]
fn serves_a_client_and_a_killed_server_is_a_typed_error() {
    let (mut child, lines) = start(&["--port", "0", "--threads", "2", "--mem", "64"]);
    assert_eq!(lines[0], "Starting RPC server v7.0.0");
    assert!(
        lines.iter().any(|l| l.contains("(64 MiB, 64 MiB free)")),
        "{lines:?}"
    );
    let ep = endpoint(&lines);
    assert!(ep.starts_with("127.0.0.1:"), "{ep}");

    let mut reg = Registry::with_defaults();
    reg.register(Arc::new(strata_rpc::RpcProvider::new()));
    let dev = reg.device(&format!("RPC[{ep}]")).unwrap();
    assert_eq!(dev.memory().unwrap().total, 64 << 20);
    let a = Tensor::new(DType::F32, &[3]).unwrap();
    let b = Tensor::new(DType::F32, &[3]).unwrap();
    let c = ops::mul(&a, &b).unwrap();
    let g = Graph::build(std::slice::from_ref(&c));
    let _bufs = alloc_graph(&g, &dev.default_buffer_type()).unwrap();
    a.write_f32(&[1.0, 2.0, 3.0]).unwrap();
    b.write_f32(&[4.0, 5.0, 6.0]).unwrap();
    let mut backend = reg.backend(&format!("RPC[{ep}]")).unwrap();
    backend.graph_compute(&g).unwrap();
    assert_eq!(c.to_f32_vec().unwrap(), vec![4.0, 10.0, 18.0]);

    // kill the server process: the client gets a typed error, no hang, no abort
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let e = backend
        .graph_compute(&g)
        .and_then(|()| backend.synchronize())
        .unwrap_err();
    assert!(matches!(e, strata::Error::Backend { .. }), "{e}");
}

#[test]
fn non_loopback_bind_warns_loudly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "rpc-server",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--threads",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    let child = Killed(child);
    let text: Vec<String> = err.lines().take(3).map(|l| l.unwrap()).collect();
    drop(child);
    assert!(
        text.iter()
            .any(|l| l.contains("WARNING") && l.contains("0.0.0.0")),
        "{text:?}"
    );
    assert!(
        text.iter().any(|l| l.contains("NO authentication")),
        "{text:?}"
    );
}

#[test]
fn bad_options_fail_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["rpc-server", "--host", "localhost"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["rpc-server", "--port", "0", "--threads", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads"));
    for (flag, value) in [
        ("--compute-timeout", "0"),
        ("--compute-timeout", "-1"),
        ("--max-graph-nodes", "0"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["rpc-server", "--port", "0", &format!("{flag}={value}")])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {value}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(flag),
            "{flag} {value}"
        );
    }
}

/// Issue 16 item 4: the per-graph node and time limits are options, shown at start.
#[test]
fn graph_limits_are_options() {
    let (_child, lines) = start(&[
        "--port",
        "0",
        "--mem",
        "64",
        "--max-graph-nodes",
        "500",
        "--compute-timeout",
        "2.5",
    ]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("500 nodes, 1 MiB messages, 2.5 s per graph")),
        "{lines:?}"
    );
}

/// `strata test-ops --device RPC[...]` against a `strata rpc-server` process,
/// as the README tells a user to run it: every case passes.
#[test]
fn test_ops_against_a_strata_rpc_server() {
    let (_child, lines) = start(&["--port", "0", "--threads", "2"]);
    let ep = endpoint(&lines);
    let text = common::test_ops(&format!("RPC[{ep}]"));
    let summary = text.lines().last().unwrap();
    assert!(summary.ends_with("0 failed (0 not supported)"), "{summary}");
    let passed: usize = summary.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(passed, strata::conformance::cases().len());
    assert!(
        text.contains("MUL_MAT(type_a=q4_1,m=33,n=5,k=256): OK"),
        "{text}"
    );
    // a device that does not exist is an error naming the known ones
    let bad = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["test-ops", "--device", "NPU9"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no device named 'NPU9'"));
}
