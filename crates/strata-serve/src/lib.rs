//! `strata serve`: an OpenAI- and Ollama-compatible HTTP server over
//! strata's batched engine.
pub mod grammar;
pub mod sampling;
