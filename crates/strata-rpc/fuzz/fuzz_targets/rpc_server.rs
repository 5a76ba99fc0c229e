//! Fuzzes the RPC server's command loop: arbitrary bytes as a client's
//! stream into an in-memory session (start from corpus/rpc_server, whose
//! seed is a valid session touching every command).
//!
//! `cargo +nightly fuzz run rpc_server` from crates/strata-rpc.
#![no_main]

use std::io::{Cursor, Read, Write};
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use strata_rpc::server::{CpuBackendFactory, Limits, Session};

struct Duplex {
    input: Cursor<Vec<u8>>,
}

impl Read for Duplex {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.input.read(b)
    }
}

impl Write for Duplex {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_message: 1 << 20,
        ..Limits::with_mem(1 << 20)
    };
    let mut s = Session::standalone(Arc::new(CpuBackendFactory::new(1)), limits);
    let stats = s.stats_handle();
    let mut io = Duplex {
        input: Cursor::new(data.to_vec()),
    };
    s.serve(&mut io);
    drop(s);
    assert_eq!(stats.get().live_buffers, 0);
});
