//! The RPC client (in progress).
