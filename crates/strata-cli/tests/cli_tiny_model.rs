//! The `strata` binary end to end on a tiny writer-made llama (random f32
//! weights, a 40-letter vocabulary): run (greedy, seeded, offloaded to the
//! simulated FAKE0 device with llama.cpp's `-ngl` spelling, `-ot`), `--fit`,
//! eval, perplexity, explain -m, and errors for user mistakes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use strata::gguf::Value;

const V: usize = 40;

fn tiny_model(dir: &Path) -> PathBuf {
    tiny_model_with(dir, "tiny.gguf", &[])
}

/// The tiny model (a 40-letter vocabulary) saved as `dir/file` with
/// metadata `set` (replacing or adding keys).
fn tiny_model_with(dir: &Path, file: &str, set: &[(&str, Value)]) -> PathBuf {
    let toks: Vec<String> = (0..V)
        .map(|i| {
            ((b'a' + (i % 26) as u8) as char)
                .to_string()
                .repeat(1 + i / 26)
        })
        .collect();
    common::tiny_llama(dir, file, toks, set)
}

fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("run strata")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "strata failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

struct TempDir(PathBuf);
impl TempDir {
    /// `strata-cli-{tag}{pid}` under the temporary directory, made anew.
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("strata-cli-{tag}{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn cli_on_a_tiny_model() {
    let dir = TempDir::new("");
    let model = tiny_model(&dir.0);
    let m = model.to_str().unwrap();
    let base = [
        "run", "-m", m, "-p", "abcab", "-n", "6", "-c", "32", "-t", "1",
    ];

    // greedy: CPU, offloaded (llama.cpp's -ngl spelling), -ot back to the CPU: same text
    let greedy = stdout(&strata(&[&base[..], &["--temp", "0"]].concat()));
    assert!(
        greedy.starts_with("abcab") && greedy.trim_end().len() > 5,
        "{greedy}"
    );
    // the greedy text again with `extra` arguments, and stderr saying each of `notes`
    let greedy_again = |extra: &[&str], notes: &[&str]| {
        let o = strata(&[&base[..], &["--temp", "0"], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(stdout(&o), greedy, "{extra:?}: {err}");
        for note in notes {
            assert!(err.contains(note), "{extra:?}: {err}");
        }
    };
    greedy_again(
        &["-ngl", "3", "--device", "FAKE0"],
        &["offloaded 3/3 layers", "splits: 2"],
    );
    // llama.cpp's count: -ngl 1 is the output layer alone; -ngl -1 is all;
    // -ngl without a device warns and runs on the CPU
    greedy_again(
        &["-ngl", "1", "--device", "FAKE0"],
        &["offloaded 1/3 layers"],
    );
    let all = strata(
        &[
            &base[..],
            &["--temp", "0", "-ngl", "-1", "--device", "FAKE0"],
        ]
        .concat(),
    );
    assert!(String::from_utf8_lossy(&all.stderr).contains("offloaded 3/3 layers"));
    greedy_again(
        &["-ngl", "99"],
        &["warning: -ngl 99 without a --device", "offloaded 0/3"],
    );
    // two devices, -ts 1/1: a block each way, and -n -1 runs to the end of the context
    greedy_again(
        &[
            "-ngl", "3", "--device", "FAKE0", "--device", "FAKE1", "-ts", "1/2",
        ],
        &[],
    );
    let long = strata(&[
        "run", "-m", m, "-p", "abcab", "-n", "-1", "-c", "16", "-t", "1", "--temp", "0",
    ]);
    assert_eq!(
        long.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&long.stderr)
    );
    greedy_again(&["-ngl", "2", "--device", "FAKE0", "-ot", "ffn=CPU"], &[]);
    let soft = strata(&[&base[..], &["--temp", "0", "--no-flash-attn"]].concat());
    assert_eq!(stdout(&soft).len(), greedy.len());
    // sampling: the seed decides
    let s1 = stdout(&strata(
        &[&base[..], &["--temp", "2", "--top-k", "0", "--seed", "9"]].concat(),
    ));
    let s2 = stdout(&strata(
        &[&base[..], &["--temp", "2", "--top-k", "0", "--seed", "9"]].concat(),
    ));
    assert_eq!(s1, s2);

    // --fit: sizes per device, no loading
    let fit = stdout(&strata(&[
        "run", "-m", m, "-p", "x", "--fit", "-ngl", "2", "--device", "FAKE0", "-c", "32",
    ]));
    assert!(fit.contains("FAKE0") && fit.contains("CPU"), "{fit}");

    // eval: raw f32 logits
    let out = dir.0.join("logits.bin");
    let o = out.to_str().unwrap();
    let eval = |extra: &[&str]| {
        let mut args = vec!["eval", "-m", m, "-p", "abc", "--logits-out", o];
        args.extend(extra);
        args.extend(["-c", "32"]);
        stdout(&strata(&args))
    };
    eval(&[]);
    assert_eq!(std::fs::metadata(&out).unwrap().len(), (V * 4) as u64);
    eval(&["--all-positions"]);
    assert_eq!(std::fs::metadata(&out).unwrap().len(), (3 * V * 4) as u64);

    // perplexity: chunks of 8 tokens, the second half scored
    let text = dir.0.join("text.txt");
    std::fs::write(&text, "abcdefghijklmnopqrstuvwxyzabcdefghijkl").unwrap();
    let ppl = stdout(&strata(&[
        "perplexity",
        "-m",
        m,
        "-f",
        text.to_str().unwrap(),
        "-c",
        "8",
    ]));
    let value: f64 = ppl
        .split("PPL = ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{ppl}"));
    assert!(value > 1.0 && value.is_finite(), "{ppl}");
    assert!(ppl.contains("[4]"), "38 tokens make 4 chunks of 8: {ppl}");

    // bench: llama-bench's comma lists, JSON and the table
    let json = stdout(&strata(&[
        "bench", "-m", m, "-p", "4,8", "-n", "2", "-t", "1,2", "-r", "2", "--json", "-c", "32",
    ]));
    let v: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let tests: Vec<(u64, &str)> = v
        .iter()
        .map(|r| (r["threads"].as_u64().unwrap(), r["test"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tests,
        vec![
            (1, "pp4"),
            (1, "pp8"),
            (1, "tg2"),
            (2, "pp4"),
            (2, "pp8"),
            (2, "tg2")
        ]
    );
    assert!(v
        .iter()
        .all(|r| r["avg_ts"].as_f64().unwrap() > 0.0
            && r["samples_ts"].as_array().unwrap().len() == 2));
    let table = stdout(&strata(&[
        "bench", "-m", m, "-p", "4", "-n", "2", "-r", "1", "-t", "1",
    ]));
    assert!(
        table.contains("| pp4 |") && table.contains("| tg2 |") && table.contains("±"),
        "{table}"
    );

    // explain -m with offload: the scheduler's splits
    let ex = stdout(&strata(&["explain", "-m", m, "-ngl", "1", "-c", "32"]));
    assert!(
        ex.contains("SPLIT") && ex.contains("FAKE0") && ex.contains("KV cache"),
        "{ex}"
    );

    // mistakes: typed errors, exit code 1
    for args in [
        vec!["run", "-m", "/nonexistent.gguf", "-p", "x"],
        vec![
            "run", "-m", m, "-p", "x", "-ngl", "1", "--device", "FAKE0", "-ts", "1,1",
        ],
        vec!["run", "-m", m, "-p", "x", "--top-p", "3"],
        vec!["run", "-m", m, "-p", "x", "-ot", "nodevice"],
    ] {
        let o = strata(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("error: "), "{args:?}: {err}");
    }
}

fn failure(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "strata should fail with exit code 1"
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `strata quantize` end to end: a Q8_0 model the other commands read,
/// and every user mistake a typed error (exit code 1, no output left).
#[test]
fn quantize_a_tiny_model() {
    let dir = TempDir::new("q-");
    let model = tiny_model(&dir.0);
    let m = model.to_str().unwrap();
    let q8 = dir.0.join("tiny-q8.gguf");
    let q = q8.to_str().unwrap();
    let out = stdout(&strata(&["quantize", m, q, "q8_0", "-t", "2", "-v"]));
    assert!(out.contains("wrote") && out.contains("q8_0"), "{out}");
    // rows of 48 (ffn_down) are no Q8_0 blocks: llama.cpp's fallback is F16
    let info = stdout(&strata(&["inspect", q]));
    assert!(
        info.contains("file type: Q8_0 (general.file_type = 7)")
            && info.contains("tensor types: 5 f32, 2 f16, 13 q8_0"),
        "{info}"
    );
    let info = stdout(&strata(&["inspect", m]));
    assert!(info.contains("file type: not recorded"), "{info}");
    assert!(info.contains("tensor types: 20 f32"), "{info}");
    let text = stdout(&strata(&[
        "run", "-m", q, "-p", "abcab", "-n", "4", "-c", "32", "-t", "1", "--temp", "0",
    ]));
    assert!(text.starts_with("abcab"), "{text}");

    let e = failure(&strata(&["quantize", m, q, "Q9_K"]));
    assert!(
        e.contains("unknown file type 'Q9_K'") && e.contains("Q4_K_M"),
        "{e}"
    );
    let e = failure(&strata(&["quantize", m, m, "Q8_0"]));
    assert!(e.contains("is the input file"), "{e}");
    let bad = dir.0.join("no/such/dir/out.gguf");
    let e = failure(&strata(&["quantize", m, bad.to_str().unwrap(), "Q8_0"]));
    assert!(e.contains("no/such/dir/out.gguf"), "{e}");
    let q4 = dir.0.join("tiny-q4.gguf");
    let e = failure(&strata(&["quantize", q, q4.to_str().unwrap(), "Q4_0"]));
    assert!(
        e.contains("is already quantized (q8_0)") && e.contains("--allow-requantize"),
        "{e}"
    );
    assert!(!q4.exists());
    let e = failure(&strata(&[
        "quantize",
        m,
        q4.to_str().unwrap(),
        "Q4_0",
        "--token-embedding-type",
        "q7_0",
    ]));
    assert!(e.contains("--token-embedding-type: 'q7_0'"), "{e}");
    stdout(&strata(&[
        "quantize",
        q,
        q4.to_str().unwrap(),
        "Q4_0",
        "--allow-requantize",
    ]));
    let names: Vec<String> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".partial")), "{names:?}");
}

/// Issue 16 items 7 and 8: hostile model files make `strata run` / `chat`
/// fail with a typed error and exit code 1 (not an abort, not a hang).
#[test]
fn hostile_model_files_are_errors() {
    let dir = TempDir::new("h-");
    let blocks = tiny_model_with(
        &dir.0,
        "blocks.gguf",
        &[("llama.block_count", Value::U64(1 << 40))],
    );
    let o = strata(&["run", "-m", blocks.to_str().unwrap(), "-p", "ab", "-n", "2"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("llama.block_count") && err.contains("2 blocks"),
        "{err}"
    );

    let loops = tiny_model_with(
        &dir.0,
        "loops.gguf",
        &[(
            "tokenizer.chat_template",
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"
                .into(),
        )],
    );
    let m = loops.to_str().unwrap();
    let t0 = std::time::Instant::now();
    let o = strata(&["run", "-m", m, "-p", "ab", "-n", "2", "--chat"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("tokenizer.chat_template") && err.contains("range()"),
        "{err}"
    );
    let mut chat = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["chat", "-m", m, "-n", "2"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    chat.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let o = chat.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("tokenizer.chat_template"), "{err}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(30));
}

/// Issue 16 item 9, issue 47: more threads than cores runs, with one
/// warning saying what it costs; past the maximum it is capped, which the
/// same warning says; 0 is an error naming the flag. The run is quick: the
/// 512 shares of work run on the available cores.
#[test]
fn thread_counts_are_checked() {
    let dir = TempDir::new("t-");
    let model = tiny_model(&dir.0);
    let m = model.to_str().unwrap();
    let o = strata(&[
        "run", "-m", m, "-p", "ab", "-n", "1", "-c", "16", "-s", "1", "-t", "600", "--poll", "0",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("warning: -t"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    for want in [
        "-t 600 exceeds",
        "cores available",
        "capped at 512",
        "use -t ",
    ] {
        assert!(warnings[0].contains(want), "{want:?} not in {err}");
    }
    let o = strata(&["run", "-m", m, "-p", "ab", "-n", "1", "-t", "0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("-t 0"));
    // --poll above 100: a usage error naming the flag, no panic.
    let o = strata(&["run", "-m", m, "-p", "ab", "-n", "1", "--poll", "101"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--poll"));
}

/// Issue 16 item 10: each mistake gets a message naming the thing and
/// saying what to do; a full context and a context above the training one
/// are told about.
#[test]
fn messages_name_the_thing() {
    let dir = TempDir::new("m-");
    let model = tiny_model(&dir.0);
    let m = model.to_str().unwrap();
    let d = dir.0.to_str().unwrap();
    let fails = |args: &[&str], wants: &[&str]| {
        let o = strata(args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        for w in wants {
            assert!(err.contains(w), "{args:?}: {w:?} not in {err}");
        }
        err
    };
    fails(&["run", "-m", d, "-p", "x"], &[d, "directory", ".gguf"]);
    let err = fails(
        &["eval", "-m", m, "-p", "abc", "--logits-out", "/"],
        &["--logits-out /", "cannot create"],
    );
    assert!(!err.contains("loaded"), "the model ran first: {err}");
    fails(&["run", "-m", m, "-p", ""], &["prompt", "empty"]);
    fails(
        &[
            "eval",
            "-m",
            m,
            "-p",
            "",
            "--logits-out",
            &format!("{d}/l.bin"),
        ],
        &["prompt", "empty"],
    );
    fails(
        &[
            "run",
            "-m",
            m,
            "-p",
            "x",
            "--device",
            "RPC[localhost]",
            "-ngl",
            "1",
        ],
        &["RPC[localhost]", "RPC[host:port]"],
    );
    let bos = tiny_model_with(
        &dir.0,
        "bos.gguf",
        &[("tokenizer.ggml.bos_token_id", Value::U32(99_999))],
    );
    fails(
        &["run", "-m", bos.to_str().unwrap(), "-p", "x"],
        &["bos_token_id = 99999", "40 tokens"],
    );
    let nan = tiny_model_with(
        &dir.0,
        "nan.gguf",
        &[("llama.rope.freq_base", Value::F32(f32::NAN))],
    );
    fails(
        &["run", "-m", nan.to_str().unwrap(), "-p", "x"],
        &["llama.rope.freq_base", "NaN"],
    );

    // a full context: exit 0, with a notice; -c above the training context: a warning
    let o = strata(&[
        "run", "-m", m, "-p", "abcab", "-n", "100", "-c", "12", "--temp", "0",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("context (-c 12) is full"), "{err}");
    let o = strata(&[
        "run", "-m", m, "-p", "ab", "-n", "1", "-c", "128", "--temp", "0",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("-c 128 is above the 64 positions"), "{err}");
}

/// `strata --version` and `-V` print the version, the commit the binary was
/// built from (or "unknown" outside git) and the CPU's ISA level: the one
/// this test process runs at, since both read the same `STRATA_ISA`.
#[test]
fn version_names_the_commit_and_the_isa_level() {
    let isa = strata::isa::active();
    for flag in ["--version", "-V"] {
        let out = stdout(&strata(&[flag]));
        let line = out.trim();
        let head = format!("strata {} (commit ", env!("CARGO_PKG_VERSION"));
        assert!(line.starts_with(&head), "{flag}: {line}");
        let commit = line[head.len()..].split(',').next().unwrap_or("");
        let hex = commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit());
        assert!(
            hex || commit == "unknown",
            "{flag}: commit {commit:?} in {line}"
        );
        assert!(
            line.contains(&format!(", ISA level {isa}")),
            "{flag}: no ISA level {isa} in {line}"
        );
        assert!(line.ends_with(')'), "{flag}: {line}");
    }
}

/// Output into a closed pipe (`strata inspect M | head -0`) ends the
/// process like `cat` (SIGPIPE), not with a panic (exit code 101).
#[cfg(unix)]
#[test]
fn a_closed_stdout_pipe_is_not_a_panic() {
    use std::process::Stdio;
    let dir = TempDir::new("pipe-");
    let model = tiny_model(&dir.0);
    let mut child = Command::new(env!("CARGO_BIN_EXE_strata"))
        .arg("inspect")
        .arg(&model)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // close the reading end before strata prints anything
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_ne!(out.status.code(), Some(101), "{err}");
}

/// Issue 15 item 6: `strata compare` runs the model's graph on a device and
/// on the CPU node by node. The CPU and the simulated FAKE0 device (the
/// CPU's kernels in memory the CPU backend cannot see) agree exactly, node
/// by node from the CPU's inputs or chained, so even `--tolerance 0` passes; the table names the model's nodes; the
/// GPU (when there is one) agrees within the default tolerance; mistakes
/// are typed errors.
#[test]
fn compare_on_a_tiny_model() {
    let dir = TempDir::new("cmp-");
    let model = tiny_model(&dir.0);
    let m = model.to_str().unwrap();
    let base = ["compare", "-m", m, "-p", "abcab", "-c", "32", "-t", "1"];
    for (device, mode) in [("CPU", "--isolated"), ("FAKE0", "--chained")] {
        let mut args = vec!["--device", device, "--tolerance", "0"];
        args.extend((mode == "--chained").then_some(mode));
        let o = strata(&[&base[..], &args[..]].concat());
        let out = stdout(&o);
        assert!(
            out.contains("no node differs beyond the tolerance 0.0e0"),
            "{out}"
        );
        for (name, op) in [
            ("inp_embd", "GET_ROWS"),
            ("result_norm", "MUL"),
            ("result_output", "MUL_MAT"),
        ] {
            let row = out
                .lines()
                .find(|l| l.split_whitespace().nth(1) == Some(name))
                .unwrap_or_else(|| panic!("no row for {name}: {out}"));
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cols[2], op, "{row}");
            assert_eq!(&cols[cols.len() - 2..], ["0.000e0", "0.000e0"], "{row}");
        }
        // the logits' row: 40 of them for the last token
        assert!(out.contains("[40]"), "{out}");
    }
    if let Ok(Some(_)) = strata_gpu::device_or_skip() {
        let o = strata(&[&base[..], &["--device", "GPU0"]].concat());
        let out = stdout(&o);
        assert!(
            out.contains("no node differs beyond the tolerance"),
            "{out}"
        );
        // at tolerance 0 either the GPU agrees to the bit or the first
        // difference is named, with exit code 1
        let o = strata(&[&base[..], &["--device", "GPU0", "--tolerance", "0"]].concat());
        if !o.status.success() {
            let err = failure(&o);
            assert!(err.contains("is the first to differ"), "{err}");
        }
    }
    for (args, wants) in [
        (
            vec!["--device", "CPU", "--device", "FAKE0"],
            "exactly one device",
        ),
        (vec![], "exactly one device"),
        (
            vec!["--device", "FAKE0", "-ngl", "1"],
            "keeps the model on the CPU",
        ),
        (vec!["--device", "CPU", "--tolerance", "-1"], "--tolerance"),
        (vec!["--device", "NPU3"], "NPU3"),
    ] {
        let err = failure(&strata(&[&base[..], &args[..]].concat()));
        assert!(err.contains(wants), "{args:?}: {err}");
    }
}

/// `strata batched-bench`: llama-batched-bench's table, one row per test
/// that fits `-c` (as llama-batched-bench skips the others), and `-np` in
/// `run --fit`; bad values are errors.
#[test]
fn batched_bench_prints_llama_batched_benchs_table() {
    let dir = TempDir::new("bb-");
    let model = tiny_model(&dir.0);
    let m = model.to_str().unwrap();
    let out = stdout(&strata(&[
        "batched-bench",
        "-m",
        m,
        "--npp",
        "8",
        "--ntg",
        "4",
        "--npl",
        "1,2,4,16",
        "-c",
        "64",
        "-t",
        "1",
    ]));
    assert!(
        out.contains("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |"),
        "{out}"
    );
    let rows: Vec<&str> = out.lines().filter(|l| l.starts_with("|     8 |")).collect();
    // 16 × (8 + 4) = 192 cells do not fit -c 64
    assert_eq!(rows.len(), 3, "{out}");
    for (row, b) in rows.iter().zip([1, 2, 4]) {
        let cols: Vec<&str> = row.split('|').map(str::trim).collect();
        assert_eq!(cols[3], b.to_string(), "{row}");
        assert_eq!(cols[4], (b * 12).to_string(), "{row}");
    }
    // llama-batched-bench's own spellings
    let shared = stdout(&strata(&[
        "batched-bench",
        "-m",
        m,
        "-npp",
        "8",
        "-ntg",
        "2",
        "-npl",
        "4",
        "-pps",
        "-c",
        "64",
        "-t",
        "1",
    ]));
    assert!(shared.contains("is_pp_shared = 1"), "{shared}");
    assert!(
        shared.contains("|     8 |      2 |    4 |     16 |"),
        "{shared}"
    );
    let err = failure(&strata(&["batched-bench", "-m", m, "--npl", "0"]));
    assert!(err.contains("at least 1"), "{err}");
    // a usage error, as clap reports them (exit code 2)
    let o = strata(&["run", "-m", m, "-np", "0", "-p", "a"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("-np 0"), "{err}");
    let fit = stdout(&strata(&[
        "run", "-m", m, "--fit", "-c", "64", "-np", "4", "-p", "a",
    ]));
    assert!(
        fit.contains("64 cells (-c) shared by up to 4 sequences"),
        "{fit}"
    );
}
