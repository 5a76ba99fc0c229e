//! `GET /metrics`: Prometheus counters, gauges and histograms
//! (prometheus-client's text format).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The server's metrics (names prefixed `strata_`).
pub struct Metrics {
    registry: Registry,
    /// Requests finished (any outcome).
    pub requests: Counter,
    /// Requests refused because the queue was full.
    pub rejected: Counter,
    /// Prompt tokens of finished requests (cached ones included).
    pub prompt_tokens: Counter,
    /// Prompt tokens computed (not found in the prefix cache).
    pub prompt_tokens_computed: Counter,
    /// Prompt tokens found in the prefix cache.
    pub prompt_tokens_cached: Counter,
    /// Generated tokens.
    pub generated_tokens: Counter,
    /// Slots running a request.
    pub busy_slots: Gauge,
    /// KV cache cells in use (running requests and the prefix cache).
    pub kv_cells_used: Gauge,
    /// Requests waiting for a slot.
    pub queue_length: Gauge,
    /// Entries of the prefix cache.
    pub prefix_entries: Gauge,
    /// Seconds from a request's arrival to its first token.
    pub ttft: Histogram,
    /// Seconds between a request's output tokens.
    pub tpot: Histogram,
    /// Seconds a request waited for a slot.
    pub queue_time: Histogram,
}

fn seconds() -> impl Iterator<Item = f64> {
    [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ]
    .into_iter()
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric registered, at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("strata");
        let requests = Counter::default();
        let rejected = Counter::default();
        let prompt_tokens = Counter::default();
        let prompt_tokens_computed = Counter::default();
        let prompt_tokens_cached = Counter::default();
        let generated_tokens = Counter::default();
        let busy_slots = Gauge::default();
        let kv_cells_used = Gauge::default();
        let queue_length = Gauge::default();
        let prefix_entries = Gauge::default();
        let ttft = Histogram::new(seconds());
        let tpot = Histogram::new(seconds());
        let queue_time = Histogram::new(seconds());
        registry.register("requests", "Requests finished", requests.clone());
        registry.register(
            "requests_rejected",
            "Requests refused with 503 (queue full)",
            rejected.clone(),
        );
        registry.register(
            "prompt_tokens",
            "Prompt tokens of finished requests",
            prompt_tokens.clone(),
        );
        registry.register(
            "prompt_tokens_computed",
            "Prompt tokens computed (not in the prefix cache)",
            prompt_tokens_computed.clone(),
        );
        registry.register(
            "prompt_tokens_cached",
            "Prompt tokens found in the prefix cache",
            prompt_tokens_cached.clone(),
        );
        registry.register(
            "generated_tokens",
            "Tokens generated",
            generated_tokens.clone(),
        );
        registry.register("busy_slots", "Slots running a request", busy_slots.clone());
        registry.register(
            "kv_cells_used",
            "KV cache cells in use",
            kv_cells_used.clone(),
        );
        registry.register(
            "queue_length",
            "Requests waiting for a slot",
            queue_length.clone(),
        );
        registry.register(
            "prefix_cache_entries",
            "Entries of the prefix cache",
            prefix_entries.clone(),
        );
        registry.register(
            "time_to_first_token_seconds",
            "Time from a request's arrival to its first token",
            ttft.clone(),
        );
        registry.register(
            "time_per_output_token_seconds",
            "Time between output tokens",
            tpot.clone(),
        );
        registry.register(
            "queue_time_seconds",
            "Time a request waited for a slot",
            queue_time.clone(),
        );
        Metrics {
            registry,
            requests,
            rejected,
            prompt_tokens,
            prompt_tokens_computed,
            prompt_tokens_cached,
            generated_tokens,
            busy_slots,
            kv_cells_used,
            queue_length,
            prefix_entries,
            ttft,
            tpot,
            queue_time,
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        // writing into a String cannot fail
        let _ = encode(&mut s, &self.registry);
        s
    }
}
