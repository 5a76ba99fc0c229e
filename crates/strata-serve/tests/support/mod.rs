//! An in-process server over the default model, and a small HTTP/1.1
//! client on std's TcpStream (so tests can also send broken requests and
//! hang up mid-stream).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use strata_models::chat::Template;
use strata_models::{Context, ContextOptions, LoadOptions, Model};
use strata_serve::{Loaded, ServeOptions};

/// The default model, or `None` (the test returns) when it is absent and
/// `STRATA_REQUIRE_MODEL` is unset.
pub fn model_path() -> Option<PathBuf> {
    let home = std::env::var("HOME").unwrap_or_default();
    let p = PathBuf::from(home).join(".cache/strata/SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.exists() {
        return Some(p);
    }
    if std::env::var("STRATA_REQUIRE_MODEL").is_ok_and(|v| v == "1") {
        panic!("{} is missing (STRATA_REQUIRE_MODEL=1)", p.display());
    }
    eprintln!(
        "skipped: {} is missing (strata run fetches it)",
        p.display()
    );
    None
}

static MODEL: Mutex<Option<Arc<Model>>> = Mutex::new(None);

/// The model, loaded once per test binary.
pub fn model(path: &PathBuf) -> Arc<Model> {
    let mut m = MODEL.lock().unwrap_or_else(|e| e.into_inner());
    m.get_or_insert_with(|| Arc::new(Model::load(path, &LoadOptions::default(), None).unwrap()))
        .clone()
}

/// A running server; stopped on drop.
pub struct Server {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts a server with `opts` (address: loopback, any port) over a
/// context of `n_ctx` cells.
pub fn start(mut opts: ServeOptions, n_ctx: usize) -> Option<Server> {
    let path = model_path()?;
    // a test with 1000 idle connections holds both ends of each
    strata_serve::raise_fd_limit();
    let model = model(&path);
    opts.addr = "127.0.0.1:0".parse().unwrap();
    let n_seq = opts.n_seq();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let load = move || {
            let context = Context::new(
                model.clone(),
                ContextOptions {
                    n_ctx,
                    n_seq_max: n_seq,
                    batch_invariant: true,
                    n_threads: 2,
                    ..ContextOptions::default()
                },
            )
            .map_err(|e| e.to_string())?;
            let template = Template::for_model(&model, None).map_err(|e| e.to_string())?;
            Ok(Loaded {
                model,
                context,
                template,
            })
        };
        let r = rt.block_on(strata_serve::serve(
            opts,
            load,
            move |a| {
                let _ = addr_tx.send(a);
            },
            async move {
                let _ = stop_rx.await;
            },
        ));
        if let Err(e) = r {
            panic!("server failed: {e}");
        }
    });
    let addr = addr_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let s = Server {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    };
    // wait for the model
    for _ in 0..600 {
        if get(addr, "/health").0 == 200 {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the server did not become healthy");
}

/// A response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn request(method: &str, path: &str, body: &str, headers: &[(&str, &str)]) -> String {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str("\r\n");
    r.push_str(body);
    r
}

/// Sends a request and reads the whole response.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    s.write_all(request(method, path, body, headers).as_bytes())
        .unwrap();
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v == "chunked")
    {
        while let Some(c) = read_chunk(&mut r) {
            body.extend_from_slice(&c);
        }
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let r = send(addr, "GET", path, "", &[]);
    (r.status, r.body)
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Resp {
    send(addr, "POST", path, &body.to_string(), &[])
}

fn read_head(r: &mut BufReader<TcpStream>) -> (u16, HashMap<String, String>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = HashMap::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    (status, headers)
}

fn read_chunk(r: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let n = usize::from_str_radix(line.trim(), 16).ok()?;
    if n == 0 {
        return None;
    }
    let mut buf = vec![0; n + 2];
    r.read_exact(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// A streamed response read event by event.
pub struct Stream {
    r: BufReader<TcpStream>,
    pending: String,
    pub status: u16,
}

impl Stream {
    pub fn open(addr: SocketAddr, path: &str, body: &Value) -> Stream {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
        s.write_all(request("POST", path, &body.to_string(), &[]).as_bytes())
            .unwrap();
        let mut r = BufReader::new(s);
        let (status, _) = read_head(&mut r);
        Stream {
            r,
            pending: String::new(),
            status,
        }
    }

    /// The next non-empty line of the body (SSE `data: ...` or an NDJSON object).
    pub fn next_line(&mut self) -> Option<String> {
        loop {
            if let Some(i) = self.pending.find('\n') {
                let line: String = self.pending.drain(..=i).collect();
                let line = line.trim();
                if !line.is_empty() {
                    return Some(line.to_string());
                }
                continue;
            }
            let c = read_chunk(&mut self.r)?;
            self.pending.push_str(&String::from_utf8_lossy(&c));
        }
    }

    /// Every remaining line.
    pub fn lines(mut self) -> Vec<String> {
        let mut v = Vec::new();
        while let Some(l) = self.next_line() {
            v.push(l);
        }
        v
    }
}

/// A metric's value from `/metrics` (the first sample whose name matches).
pub fn metric(addr: SocketAddr, name: &str) -> f64 {
    let (_, body) = get(addr, "/metrics");
    body.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{body}"))
}
