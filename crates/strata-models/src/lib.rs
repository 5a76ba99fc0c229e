//! Language models on strata: llama.cpp-compatible tokenizers, GGUF model
//! loading with device placement, one decoder graph for the supported
//! families (`llama`, `qwen2`, `qwen3`, `qwen3moe`, `gemma2`, `gemma3`,
//! `phi3`), a KV cache, a context that runs graphs through strata's
//! scheduler, sampling, chat templates, a generation session and model
//! quantization (llama-quantize's file types and bytes).
//!
//! # Generate text
//!
//! [`session::Session`] loads a model and generates; [`Context`] is the
//! layer under it (decode a batch, get logits) and [`Model`] the loaded
//! weights. [`LoadOptions`] places layers on other devices as llama.cpp's
//! `-ngl` does (their providers come from `strata-gpu` or `strata-rpc`).
//!
//! ```no_run
//! use strata_models::sample::{Sampler, SamplerConfig};
//! use strata_models::session::{Session, SessionOptions};
//!
//! let mut s = Session::load("SmolLM2-135M-Instruct.Q4_1.gguf", &SessionOptions::default(), None)?;
//! let prompt = s.tokenize("The capital of France is")?;
//! let mut g = s.generate(&prompt, Sampler::new(SamplerConfig::greedy())?, 16)?;
//! while let Some(token) = g.next_token()? {
//!     print!("{}", token.text);
//! }
//! println!("\n{:.1} tokens/s", g.stats().gen_tps());
//! # Ok::<(), strata_models::ModelError>(())
//! ```
//!
//! # Sampling
//!
//! llama.cpp's chain (penalties, top-k, top-p, min-p, temperature, a seeded
//! draw): the same seed gives the same tokens.
//!
//! ```
//! use strata_models::sample::{Sampler, SamplerConfig};
//!
//! let logits = [0.1, 2.0, -1.0, 1.9];
//! assert_eq!(Sampler::new(SamplerConfig::greedy())?.sample(&logits)?, 1);
//! let cfg = SamplerConfig { seed: 7, ..SamplerConfig::default() };
//! let first = Sampler::new(cfg.clone())?.sample(&logits)?;
//! assert_eq!(Sampler::new(cfg)?.sample(&logits)?, first);
//! # Ok::<(), strata_models::ModelError>(())
//! ```
//!
//! # Chat templates
//!
//! A model's `tokenizer.chat_template` renders as Hugging Face transformers
//! renders it (minijinja, with limits on what a template may build).
//!
//! ```
//! use strata_models::chat::{ChatTemplate, Message};
//!
//! let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n\
//!               {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
//! let t = ChatTemplate::new(chatml, "", "")?;
//! let text = t.render(&[Message::new("user", "Hi")], true)?;
//! assert_eq!(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
//! # Ok::<(), strata_models::ModelError>(())
//! ```
//!
//! # Stability
//!
//! strata-models is at 0.x, as strata is: a new 0.x minor version may change
//! any API. Errors are [`ModelError`]; the runtime's own errors arrive inside
//! it.
#![warn(missing_docs)]

pub mod batch;
pub mod cells;
pub mod chat;
pub mod context;
pub mod error;
pub mod gguf;
pub mod graph;
pub mod kld;
pub mod kv;
pub mod model;
pub mod quantize;
pub mod sample;
pub mod session;
pub mod tokenizer;

pub use batch::{Batch, BatchLogits};
pub use cells::{SeqId, SeqSet};
pub use context::{Context, ContextOptions, DecodeTimings, Logits};
pub use error::{BatchError, ModelError, Result};
pub use graph::Attention;
pub use model::{LoadOptions, Model, PlacementSpec};
pub use tokenizer::{Tokenizer, TokenizerError, TokenizerParts};
