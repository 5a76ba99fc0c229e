//! The conformance suite on a remote device: strata's RPC client against
//! strata's in-process server on a loopback port (the server computes with
//! its CPU backend; every tensor crosses the protocol).

use std::sync::Arc;

use strata::backend::Device;
use strata::conformance::UnderTest;
use strata_rpc::server::CpuBackendFactory;
use strata_rpc::{Limits, RpcProvider, Server};

/// An RPC backend on a fresh 2-thread CPU server; the server and the
/// provider live as long as the backend.
fn rpc_loopback() -> strata::Result<UnderTest> {
    let server = Server::bind(
        "127.0.0.1:0",
        Arc::new(CpuBackendFactory::new(2)),
        Limits::default(),
    )?;
    let (addr, handle) = server.spawn_background()?;
    let provider = RpcProvider::new();
    let Some(dev) = provider.connect(&addr.to_string())?.into_iter().next() else {
        return Err(strata::Error::Backend {
            backend: "RPC".into(),
            msg: format!("the server at {addr} lists no device"),
        });
    };
    Ok(UnderTest::boxed(dev.init_backend()?).keeping((handle, provider)))
}

strata::conformance_suite!(rpc, rpc_loopback);
