//! `strata serve`: an OpenAI- and Ollama-compatible HTTP server over
//! strata's batched engine.
