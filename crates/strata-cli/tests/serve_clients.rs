//! `strata serve` against real clients: the official `openai` python
//! package, Ollama's API over plain HTTP, and the chat page in headless
//! Chromium (selenium). The python side is `tests/python/`; this test
//! starts the servers (one open, one with `--api-key`), runs pytest on it
//! and asserts that every test passed, none skipped.
//!
//! Without python's `openai`, `pytest` or `selenium`, or Debian's
//! `chromium` and `chromium-driver`, the tests that need them are skipped
//! with a printed reason; under `STRATA_REQUIRE_CLIENTS=1` (CI) they fail.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Killed;

const API_KEY: &str = "strata-test-key-0123";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A running `strata serve`, killed when dropped; its stderr is kept for
/// failure messages.
struct Server {
    _child: Killed,
    url: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(model: &Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("serve")
            .arg("-m")
            .arg(model)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "-np",
                "4",
                "-c",
                "4096",
            ])
            .args(["-t", "2"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("strata serve starts");
        let err = BufReader::new(child.stderr.take().expect("piped stderr"));
        let child = Killed(child);
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let lines = Arc::clone(&stderr);
        // reads stderr to its end, so the server never blocks on a full pipe
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                if let Some(at) = line.split("listening on ").nth(1) {
                    let url = at.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(url);
                }
                lines.lock().unwrap().push(line);
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(180))
            .unwrap_or_else(|_| {
                panic!(
                    "strata serve {extra:?} printed no `listening on` line:\n{}",
                    stderr.lock().unwrap().join("\n")
                )
            });
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        assert!(!url.ends_with(":0"), "the real port is printed: {url}");
        Server {
            _child: child,
            url,
            stderr,
        }
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }
}

/// What is missing to run the clients (python modules, the browser), or
/// `None`.
fn missing(modules: &[&str], browser: bool) -> Option<String> {
    let mut gone = Vec::new();
    for m in modules {
        let ok = Command::new("python3")
            .args(["-c", &format!("import {m}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            gone.push(format!("python3 module {m} (pip install {m})"));
        }
    }
    if browser {
        for p in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(p).exists() {
                gone.push(format!("{p} (apt-get install chromium chromium-driver)"));
            }
        }
    }
    (!gone.is_empty()).then(|| gone.join(", "))
}

/// `true` when the clients `what` needs are there; else prints why it is
/// skipped, or fails under `STRATA_REQUIRE_CLIENTS=1`.
fn have_clients(what: &str, modules: &[&str], browser: bool) -> bool {
    let Some(gone) = missing(modules, browser) else {
        return true;
    };
    let msg = format!("SKIPPED: {what} did not run: missing {gone}");
    if std::env::var("STRATA_REQUIRE_CLIENTS").is_ok_and(|v| v == "1") {
        panic!("{msg} (STRATA_REQUIRE_CLIENTS=1)");
    }
    eprintln!("{msg}");
    false
}

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python")
}

/// Runs pytest on `file` (in tests/python) with `env` and asserts that it
/// passed with no test skipped; `servers`' logs are shown if not.
fn pytest(file: &str, env: &[(&str, &str)], servers: &[&Server]) {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
        .arg(python_dir().join(file))
        .current_dir(python_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("python3 runs");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let t0 = Instant::now();
    let out = rx
        .recv_timeout(Duration::from_secs(20 * 60))
        .unwrap_or_else(|_| panic!("pytest {file} ran past 20 minutes"))
        .expect("pytest's output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let logs: Vec<String> = servers.iter().map(|s| s.log()).collect();
    eprintln!("pytest {file} ({:.0?}):\n{stdout}{stderr}", t0.elapsed());
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        out.status.success(),
        "pytest {file} failed:\n{stdout}\n{stderr}\nserver logs:\n{}",
        logs.join("\n---\n")
    );
    assert!(summary.contains(" passed"), "no test ran: {summary}");
    assert!(
        !summary.contains("skipped"),
        "tests were skipped: {summary}\n{stdout}"
    );
}

#[test]
fn openai_ollama_and_browser_clients() {
    let Some(model) = common::q4_1_model("the serve client tests") else {
        return;
    };
    let api = have_clients("the openai-client tests", &["openai", "pytest"], false);
    let browser = have_clients("the browser tests", &["pytest", "selenium"], true);
    if !api && !browser {
        return;
    }
    let open = Server::start(&model, &[]);
    let auth = Server::start(&model, &["--api-key", API_KEY]);
    let model_s = model.to_str().expect("a UTF-8 model path");
    let env = [
        ("STRATA_SERVE_URL", open.url.as_str()),
        ("STRATA_SERVE_AUTH_URL", auth.url.as_str()),
        ("STRATA_SERVE_API_KEY", API_KEY),
        ("STRATA_BIN", env!("CARGO_BIN_EXE_strata")),
        ("STRATA_MODEL", model_s),
    ];
    if api {
        pytest("test_openai_client.py", &env, &[&open, &auth]);
    }
    if browser {
        pytest("test_browser.py", &env, &[&open, &auth]);
    }
}
