//! The RPC server (in progress).
