//! Test-only helpers.

#![allow(dead_code)]

pub mod gguf_vocab;
