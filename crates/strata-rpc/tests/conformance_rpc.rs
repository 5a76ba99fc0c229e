//! The conformance suite on a remote device: strata's RPC client against
//! strata's in-process server on a loopback port (the server computes with
//! its CPU backend; every tensor crosses the protocol).

use strata::backend::Device;
use strata::conformance::UnderTest;
use strata_rpc::server::spawn_loopback_cpu;
use strata_rpc::RpcProvider;

/// An RPC backend on a fresh 2-thread CPU server; the server and the
/// provider live as long as the backend.
fn rpc_loopback() -> strata::Result<UnderTest> {
    let (addr, handle) = spawn_loopback_cpu(2)?;
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
