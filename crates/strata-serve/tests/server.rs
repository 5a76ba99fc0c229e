//! `strata serve` end to end over the default model: the endpoints'
//! shapes, errors, batch invariance seen through the API, the prefix
//! cache, cancellation, the queue bound and idle connections.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strata_serve::ServeOptions;
use support::{get, metric, post, send, start, Stream};

fn words(n: usize, seed: usize) -> String {
    const W: &[&str] = &[
        "river", "stone", "garden", "light", "music", "winter", "number", "paper", "island",
        "engine", "forest", "market", "silver", "teacher", "window", "planet",
    ];
    (0..n)
        .map(|i| W[(i * 7 + seed * 13 + i / 3) % W.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn opts(n_slots: usize) -> ServeOptions {
    ServeOptions {
        n_slots,
        ..ServeOptions::default()
    }
}

/// [`opts`] with the prefix cache off (no holders).
fn no_prefix_cache(n_slots: usize) -> ServeOptions {
    ServeOptions {
        n_holders: 0,
        ..opts(n_slots)
    }
}

#[test]
fn endpoints_answer_in_openai_and_ollama_shapes() {
    let Some(s) = start(opts(4), 2048) else {
        return;
    };
    let a = s.addr;
    assert_eq!(get(a, "/health"), (200, r#"{"status":"ok"}"#.into()));
    let models = serde_json::from_str::<Value>(&get(a, "/v1/models").1).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["meta"]["n_ctx"], 2048);
    assert!(get(a, "/").1.contains("<html"));

    // tokenizer and template endpoints agree with each other
    let t = post(a, "/tokenize", &json!({"content": "Hello world"})).json();
    let ids = t["tokens"].as_array().unwrap().clone();
    assert!(!ids.is_empty());
    let d = post(a, "/detokenize", &json!({"tokens": ids})).json();
    assert_eq!(d["content"], "Hello world");
    let p = post(
        a,
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    )
    .json();
    let prompt = p["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("Hi") && prompt.contains("assistant"),
        "{prompt}"
    );

    // chat, not streamed
    let msgs = json!([{"role": "user", "content": "What is 2 + 2?"}]);
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": msgs, "temperature": 0, "max_tokens": 12}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let c = r.json();
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["choices"][0]["message"]["role"], "assistant");
    let text = c["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!text.is_empty());
    let u = &c["usage"];
    assert_eq!(
        u["total_tokens"],
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    assert!(u["completion_tokens"].as_u64().unwrap() <= 12);

    // the same request streamed: the same text, then the finish reason and usage
    let st = Stream::open(
        a,
        "/v1/chat/completions",
        &json!({"messages": msgs, "temperature": 0,
        "max_tokens": 12, "stream": true, "stream_options": {"include_usage": true}}),
    );
    assert_eq!(st.status, 200);
    let lines = st.lines();
    assert_eq!(lines.last().unwrap(), "data: [DONE]");
    let chunks: Vec<Value> = lines[..lines.len() - 1]
        .iter()
        .map(|l| serde_json::from_str(l.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, text);
    let fin = chunks
        .iter()
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .count();
    assert_eq!(fin, 1);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"].as_array().unwrap().len(), 0);
    assert_eq!(last["usage"]["completion_tokens"], u["completion_tokens"]);
    // the repeated prompt came from the prefix cache
    assert!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    // completions with logprobs and n = 2
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 6,
        "temperature": 0.9, "seed": 7, "n": 2, "logprobs": 3}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let c = r.json();
    let ch = c["choices"].as_array().unwrap();
    assert_eq!(ch.len(), 2);
    for x in ch {
        let lp = &x["logprobs"];
        let n = lp["tokens"].as_array().unwrap().len();
        assert!(n >= 1);
        assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), n);
        for (i, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
            let top = top.as_object().unwrap();
            assert!(!top.is_empty() && top.len() <= 3);
            let chosen = lp["token_logprobs"][i].as_f64().unwrap();
            assert!(chosen <= 0.0);
            assert!(top.values().all(|v| v.as_f64().unwrap() <= 0.0));
        }
        let joined: String = lp["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert!(joined.starts_with(x["text"].as_str().unwrap()) || x["finish_reason"] == "stop");
    }
    // the prompt was counted once for both choices
    assert_eq!(c["usage"]["prompt_tokens"], 5);

    // chat logprobs in OpenAI's shape
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": msgs, "max_tokens": 3,
        "temperature": 0, "logprobs": true, "top_logprobs": 2}),
    )
    .json();
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert!(!content.is_empty());
    for t in content {
        assert!(t["token"].is_string() && t["bytes"].is_array());
        let top = t["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2);
        // greedy: the chosen token is the most likely one
        assert_eq!(top[0]["logprob"], t["logprob"]);
    }

    // a JSON schema is followed
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": false});
    let r = post(
        a,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user",
        "content": "Give a person as JSON."}], "max_tokens": 64, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let out = r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v["name"].is_string() && v["age"].is_i64(), "{v}");

    // Ollama: streamed NDJSON and not
    let st = Stream::open(
        a,
        "/api/chat",
        &json!({"model": "x", "messages": msgs,
        "options": {"temperature": 0, "num_predict": 12}}),
    );
    let lines: Vec<Value> = st
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines.last().unwrap();
    assert_eq!(last["done"], true);
    assert!(last["eval_count"].as_u64().unwrap() >= 1);
    let ollama_text: String = lines
        .iter()
        .filter_map(|l| l["message"]["content"].as_str())
        .collect();
    assert_eq!(ollama_text, text);
    let r = post(
        a,
        "/api/generate",
        &json!({"prompt": "What is 2 + 2?", "stream": false,
        "options": {"temperature": 0, "num_predict": 12}}),
    )
    .json();
    assert_eq!(r["done"], true);
    assert_eq!(r["response"].as_str().unwrap(), text);
    assert!(get(a, "/api/tags").1.contains("\"models\""));

    // metrics count what happened
    assert!(metric(a, "strata_requests_total") >= 6.0);
    assert!(metric(a, "strata_generated_tokens_total") >= 20.0);
    assert!(metric(a, "strata_prompt_tokens_cached_total") > 0.0);
    assert!(metric(a, "strata_time_to_first_token_seconds_count") >= 6.0);
    assert_eq!(metric(a, "strata_busy_slots"), 0.0);
}

#[test]
fn bad_requests_get_4xx_with_openai_error_objects() {
    let Some(s) = start(
        ServeOptions {
            body_limit: 64 << 10,
            ..opts(2)
        },
        256,
    ) else {
        return;
    };
    let a = s.addr;
    let check = |r: support::Resp, status: u16, needle: &str| {
        assert_eq!(r.status, status, "{}", r.body);
        let e = r.json();
        let m = e["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{e}"));
        assert!(e["error"]["type"].is_string());
        assert!(m.contains(needle), "{m:?} lacks {needle:?}");
    };
    let chat = "/v1/chat/completions";
    check(
        send(a, "POST", chat, "{not json", &[]),
        400,
        "invalid request body",
    );
    check(
        post(a, chat, &json!({"messages": "hi"})),
        400,
        "invalid request body",
    );
    check(
        post(
            a,
            chat,
            &json!({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
        ),
        400,
        "invalid",
    );
    check(
        post(a, chat, &json!({"messages": []})),
        400,
        "messages is empty",
    );
    let long = words(400, 1);
    check(
        post(a, "/v1/completions", &json!({"prompt": long})),
        400,
        "context holds 256",
    );
    for m in [0, -5] {
        check(
            post(
                a,
                "/v1/completions",
                &json!({"prompt": "a", "max_tokens": m}),
            ),
            400,
            "max_tokens",
        );
    }
    check(
        post(a, "/v1/completions", &json!({"prompt": "a", "n": 3})),
        400,
        "between 1 and 2",
    );
    check(
        post(a, "/v1/completions", &json!({"prompt": [999999]})),
        400,
        "outside the vocabulary",
    );
    check(
        post(
            a,
            chat,
            &json!({"messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "objekt"}}}}),
        ),
        400,
        "response_format",
    );
    check(
        post(
            a,
            chat,
            &json!({"messages": [{"role": "user", "content": "x"}],
        "response_format": {"type": "xml"}}),
        ),
        400,
        "response_format",
    );
    check(
        post(a, "/v1/completions", &json!({"prompt": "a", "top_p": 3.0})),
        400,
        "top",
    );
    check(
        post(
            a,
            "/v1/completions",
            &json!({"prompt": "a", "logprobs": 50}),
        ),
        400,
        "logprobs",
    );
    check(
        send(a, "GET", "/v2/nothing", "", &[]),
        404,
        "no such endpoint",
    );
    // over the body limit
    let big = json!({"prompt": "a".repeat(100 << 10)}).to_string();
    let r = send(a, "POST", "/v1/completions", &big, &[]);
    assert_eq!(r.status, 413);
    // the server is still fine
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn api_key_is_required_but_not_for_health() {
    let Some(s) = start(
        ServeOptions {
            api_key: Some("sekret".into()),
            ..opts(1)
        },
        256,
    ) else {
        return;
    };
    let a = s.addr;
    assert_eq!(get(a, "/health").0, 200);
    let body = json!({"prompt": "Hi", "max_tokens": 2}).to_string();
    for h in [
        vec![],
        vec![("Authorization", "Bearer wrong")],
        vec![("Authorization", "sekret")],
    ] {
        let r = send(a, "POST", "/v1/completions", &body, &h);
        assert_eq!(r.status, 401, "{}", r.body);
        assert_eq!(r.json()["error"]["type"], "authentication_error");
    }
    assert_eq!(get(a, "/metrics").0, 401);
    let r = send(
        a,
        "POST",
        "/v1/completions",
        &body,
        &[("Authorization", "Bearer sekret")],
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

/// With temperature 0 a request's tokens (and their log-probabilities, to
/// the bit) are the same alone and among 16 concurrent requests of other
/// lengths, whatever the slots, cells and batches they shared.
#[test]
fn same_answer_alone_and_under_load() {
    let Some(s) = start(opts(8), 4096) else {
        return;
    };
    let a = s.addr;
    let req = |p: &str| json!({"prompt": p, "max_tokens": 16, "temperature": 0, "logprobs": 1, "ignore_eos": true});
    let probe = format!("Tell me about {}.", words(30, 99));
    let alone = post(a, "/v1/completions", &req(&probe)).json();
    let key = |v: &Value| {
        (
            v["choices"][0]["text"].clone(),
            v["choices"][0]["logprobs"]["token_logprobs"].clone(),
        )
    };
    let want = key(&alone);
    let mut handles = Vec::new();
    for i in 0..16 {
        let p = if i == 5 {
            probe.clone()
        } else {
            words(10 + 23 * i, i)
        };
        handles.push(std::thread::spawn(move || {
            // staggered, so the probe joins batches already running
            std::thread::sleep(Duration::from_millis(20 * i as u64));
            (i, post(a, "/v1/completions", &req(&p)))
        }));
    }
    for h in handles {
        let (i, r) = h.join().unwrap();
        assert_eq!(r.status, 200, "{}", r.body);
        if i == 5 {
            assert_eq!(
                key(&r.json()),
                want,
                "the probe's tokens changed under load"
            );
        }
    }
    // and again with the prefix cache off: the cached prompt gave the same bits
    drop(s);
    let Some(s) = start(no_prefix_cache(8), 4096) else {
        return;
    };
    let fresh = post(s.addr, "/v1/completions", &req(&probe)).json();
    assert_eq!(key(&fresh), want);
}

/// A long shared system prompt is computed once: later requests find it
/// cached, and their answers equal a server's without the cache.
#[test]
fn prefix_cache_shares_a_system_prompt() {
    let Some(s) = start(opts(4), 4096) else {
        return;
    };
    let a = s.addr;
    let system = words(400, 3);
    let ask = |q: &str| {
        json!({"messages": [{"role": "system", "content": system},
        {"role": "user", "content": q}], "max_tokens": 8, "temperature": 0})
    };
    let t0 = Instant::now();
    let first = post(a, "/v1/chat/completions", &ask("Question one?")).json();
    let first_time = t0.elapsed();
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let n_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let mut later = Vec::new();
    for q in ["Question two?", "Another question, three?", "Four?"] {
        let r = post(a, "/v1/chat/completions", &ask(q)).json();
        let cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        // everything up to the user's turn came from the cache
        assert!(cached >= n_prompt - 12, "cached {cached} of {n_prompt}");
        later.push((q, r["choices"][0]["message"]["content"].clone()));
    }
    assert!(metric(a, "strata_prompt_tokens_cached_total") >= 3.0 * (n_prompt as f64 - 12.0));
    eprintln!("first request {first_time:?}");
    drop(s);
    let Some(s) = start(no_prefix_cache(4), 4096) else {
        return;
    };
    for (q, text) in later {
        let r = post(s.addr, "/v1/chat/completions", &ask(q)).json();
        assert_eq!(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        assert_eq!(r["choices"][0]["message"]["content"], text);
    }
}

/// Concurrent requests with the same long start compute it once: the
/// later ones wait for the first slot to read it, then share its cells.
#[test]
fn concurrent_requests_share_a_prompt_start() {
    let Some(s) = start(opts(4), 4096) else {
        return;
    };
    let a = s.addr;
    let system = words(300, 5);
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let body = json!({"prompt": format!("{system} Question {i}:"), "max_tokens": 4, "temperature": 0});
            std::thread::spawn(move || post(a, "/v1/completions", &body).json())
        })
        .collect();
    let cached: Vec<u64> = handles
        .into_iter()
        .map(|h| {
            h.join().unwrap()["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()
        })
        .collect();
    // one of them computed the start; the others shared it
    assert_eq!(cached.iter().filter(|&&c| c == 0).count(), 1, "{cached:?}");
    assert!(
        cached.iter().filter(|&&c| c > 250).count() >= 3,
        "{cached:?}"
    );
}

#[test]
fn a_client_that_hangs_up_frees_its_slot() {
    let Some(s) = start(opts(1), 2048) else {
        return;
    };
    let a = s.addr;
    let mut st = Stream::open(
        a,
        "/v1/completions",
        &json!({"prompt": "Once upon a time",
        "max_tokens": 2000, "ignore_eos": true, "stream": true}),
    );
    for _ in 0..3 {
        assert!(st.next_line().unwrap().starts_with("data: "));
    }
    assert_eq!(metric(a, "strata_busy_slots"), 1.0);
    drop(st);
    let t0 = Instant::now();
    while metric(a, "strata_busy_slots") != 0.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the slot was not freed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // the one slot serves the next request
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 3}),
    );
    assert_eq!(r.status, 200);
    assert!(metric(a, "strata_generated_tokens_total") < 1000.0);
}

#[test]
fn a_flood_past_the_queue_gets_503() {
    let Some(s) = start(
        ServeOptions {
            queue_max: 2,
            ..opts(1)
        },
        2048,
    ) else {
        return;
    };
    let a = s.addr;
    let handles: Vec<_> = (0..10)
        .map(|_| {
            std::thread::spawn(move || {
                send(
                    a,
                    "POST",
                    "/v1/completions",
                    &json!({"prompt": "Count:", "max_tokens": 40, "ignore_eos": true}).to_string(),
                    &[],
                )
            })
        })
        .collect();
    let rs: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = rs.iter().filter(|r| r.status == 200).count();
    let busy: Vec<_> = rs.iter().filter(|r| r.status == 503).collect();
    assert_eq!(ok + busy.len(), 10);
    assert!(ok >= 1 && !busy.is_empty(), "{ok} ok, {} busy", busy.len());
    for r in busy {
        assert_eq!(r.headers.get("retry-after").map(String::as_str), Some("1"));
        assert_eq!(r.json()["error"]["type"], "unavailable_error");
    }
}

#[test]
fn idle_connections_do_not_starve_clients() {
    let Some(s) = start(opts(1), 512) else { return };
    let a = s.addr;
    let idle: Vec<_> = (0..1000)
        .map(|_| std::net::TcpStream::connect(a).unwrap())
        .collect();
    let t0 = Instant::now();
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200);
    assert!(t0.elapsed() < Duration::from_secs(20));
    drop(idle);
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Connections past `max_connections` are closed at once, an idle one is
/// closed after the idle timeout, and memory stays bounded through it.
#[test]
fn connections_are_bounded_and_idle_ones_time_out() {
    use std::io::Read;
    let Some(s) = start(
        ServeOptions {
            max_connections: 8,
            idle_timeout: Duration::from_secs(1),
            ..opts(1)
        },
        512,
    ) else {
        return;
    };
    let a = s.addr;
    let rss0 = rss_kib();
    let idle: Vec<_> = (0..8)
        .map(|_| std::net::TcpStream::connect(a).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // the ninth is closed without an answer
    let mut extra = std::net::TcpStream::connect(a).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(extra.read(&mut buf).unwrap_or(0), 0);
    // the idle ones are closed after the timeout
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t0 = Instant::now();
        let n = c.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0);
        assert!(t0.elapsed() < Duration::from_secs(4));
    }
    // a keep-alive connection idle after its request is closed too
    let mut k = std::net::TcpStream::connect(a).unwrap();
    k.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(&mut k, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let t0 = Instant::now();
    loop {
        let mut b = [0u8; 512];
        match k.read(&mut b) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e) => panic!("not closed after {:?}: {e}", t0.elapsed()),
        }
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    assert!(t0.elapsed() < Duration::from_secs(4));
    // then a client is served again
    let r = post(
        a,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2}),
    );
    assert_eq!(r.status, 200);
    let grown = rss_kib().saturating_sub(rss0);
    assert!(grown < 256 << 10, "RSS grew by {grown} KiB");
}
