//! Issue 16 item 8: hostile chat templates that grow strings and lists
//! (doubling by `~`, `+`, `*`, `chain`, captures; `join`, `replace`,
//! `tojson`... of large values; constants folded as the template compiles)
//! stop with the typed template error, and the process's peak memory stays
//! bounded; so do templates nesting lists and maps past `MAX_DEPTH` or
//! making a namespace hold itself (which would overflow the stack: a crash
//! of this binary fails the test). One test in its own binary, so that the peak (`VmHWM`) is this
//! test's alone.

use strata_models::chat::{ChatTemplate, Message, MAX_BUILT, MAX_DEPTH};
use strata_models::ModelError;

const NAME: &str = "tokenizer.chat_template";

/// Grows `ns.x` `n` times by `step` (a `{% set %}` inside a loop is local
/// to the iteration: a namespace carries the value across).
fn doubling(init: &str, step: &str) -> String {
    format!(
        "{{% set ns = namespace(x={init}) %}}{{% for i in range(60) %}}{{% set ns.x = {step} %}}{{% endfor %}}{{{{ ns.x|length }}}}"
    )
}

fn hostile() -> Vec<(&'static str, String, String)> {
    let s = |x: &str| x.to_string();
    vec![
        ("`~` doubling", doubling("'x'", "ns.x ~ ns.x"), s("`~` concatenation")),
        (
            "`~` doubling, unrolled",
            format!("{{% set s = 'x' %}}{}{{{{ s|length }}}}", "{% set s = s ~ s %}".repeat(40)),
            s("`~` concatenation"),
        ),
        ("`+` doubling", doubling("'x'", "ns.x + ns.x"), s("string built by `+`")),
        ("`*` doubling", doubling("'x'", "ns.x * 2"), s("string built by `*`")),
        (
            "`*` repetition",
            s("{% set n = 100000000 %}{{ ('x' * n)|length }}"),
            s("string built by `*`"),
        ),
        (
            "`*` repetition, constant",
            s("{{ ('x' * 100000000)|length }}"),
            s("constant expression"),
        ),
        ("list doubling by `+`", doubling("[1]", "ns.x + ns.x"), s("list built by `+`")),
        ("list doubling by `*`", doubling("[1]", "ns.x * 2"), s("list built by `*`")),
        ("list doubling by `chain`", doubling("[1]", "ns.x|chain(ns.x)"), s("`chain` result")),
        (
            "`join` of a large list",
            s("{% set l = ['x' * 64] * 300000 %}{{ l|join|length }}"),
            s("`join` result"),
        ),
        (
            "nested loops emitting text",
            s("{% for i in range(10000) %}{% for j in range(10000) %}{{ 'x' * 1000 }}{% endfor %}{% endfor %}"),
            s("rendered prompt exceeds"),
        ),
        (
            "nested loops emitting into a capture",
            format!(
                "{{% set s %}}{{% for i in range(10000) %}}{{% for j in range(10000) %}}{}{{% endfor %}}{{% endfor %}}{{% endset %}}{{{{ s|length }}}}",
                "x".repeat(100)
            ),
            s("`{% set %}` capture"),
        ),
        (
            "capture doubling",
            format!(
                "{{% set s = 'x' %}}{}{{{{ s|length }}}}",
                "{% set s %}{{ s }}{{ s }}{% endset %}".repeat(40)
            ),
            s("`{% set %}` capture"),
        ),
        ("`replace` growth", doubling("'xxxx'", "ns.x|replace('x', ns.x)"), s("`replace` result")),
        ("`tojson` growth", doubling("'<'", "ns.x|tojson"), s("`tojson` result")),
        (
            "a shared list as a string",
            doubling("[1]", "[ns.x, ns.x]").replace("ns.x|length", "ns.x|string|length"),
            s("string conversion"),
        ),
        (
            "a shared list emitted",
            doubling("[1]", "[ns.x, ns.x]").replace("ns.x|length", "ns.x"),
            s("emitted value"),
        ),
        ("`indent` width", s("{{ 'a\nb'|indent(1000000000) }}"), s("`indent` result")),
        ("`format` width", s("{{ '%1000000000s'|format('x') }}"), s("`format` result")),
        ("`batch` count", s("{{ [1]|batch(1000000000) }}"), s("list of lists")),
        (
            "`list` of a long string",
            s("{% set s = 'x' * 8000000 %}{{ s|list|length }}"),
            s("`list` result"),
        ),
        (
            "a shared list as an exception message",
            doubling("[1]", "[ns.x, ns.x]").replace("{{ ns.x|length }}", "{{ raise_exception(ns.x) }}"),
            s("a message of more than"),
        ),
        (
            "constants compared as the template compiles",
            s("{{ ([1] * 1000000000000) == ([1] * 1000000000000) }}"),
            s("constant expression"),
        ),
        (
            "many values each under the cap",
            s("{% set s = 'x' * 4000000 %}{% set ns = namespace(l=[]) %}{% for i in range(10000) %}{% set ns.l = ns.l + [s ~ i] %}{% endfor %}{{ ns.l|length }}"),
            format!("more than {MAX_BUILT} bytes"),
        ),
        // Issue 16 item 8, nesting: values deep enough to overflow the
        // stack when dropped or printed, and namespaces holding themselves.
        (
            "a million-deep list",
            s("{% set ns = namespace(l=[]) %}{% for i in range(10000) %}{% for j in range(100) %}{% set ns.l = [ns.l] %}{% endfor %}{% endfor %}{{ ns.l|length }}"),
            format!("more than {MAX_DEPTH} lists and maps deep"),
        ),
        (
            "a deep map",
            s("{% set ns = namespace(d={}) %}{% for i in range(10000) %}{% set ns.d = {'d': ns.d} %}{% endfor %}{{ ns.d }}"),
            format!("more than {MAX_DEPTH} lists and maps deep"),
        ),
        (
            "a deep list by `batch`",
            s("{% set ns = namespace(l=[1]) %}{% for i in range(10000) %}{% set ns.l = ns.l|batch(1) %}{% endfor %}{{ ns.l }}"),
            format!("more than {MAX_DEPTH} lists and maps deep"),
        ),
        (
            "a deep map by `dict`",
            s("{% set ns = namespace(d=1) %}{% for i in range(10000) %}{% set ns.d = dict(d=ns.d) %}{% endfor %}{{ ns.d }}"),
            format!("more than {MAX_DEPTH} lists and maps deep"),
        ),
        (
            "a namespace holding itself, printed",
            s("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
            s("holds a namespace"),
        ),
        (
            "a namespace holding itself, as JSON",
            s("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}"),
            s("holds a namespace"),
        ),
        (
            "a namespace holding itself, compared",
            s("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns == ns.me }}"),
            s("holds a namespace"),
        ),
        (
            "a namespace in a list in itself",
            s("{% set ns = namespace() %}{% set l = [1, ns] %}{% set ns.l = l %}{{ l }}"),
            s("holds a namespace"),
        ),
        (
            "a namespace in a map in a list in itself",
            s("{% set ns = namespace() %}{% set ns.l = [{'n': ns}] %}{{ ns|tojson }}"),
            s("holds a namespace"),
        ),
        (
            "a namespace in another, crosswise",
            s("{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}{{ a }}"),
            s("holds a namespace"),
        ),
    ]
}

/// `VmHWM` (peak resident memory) of this process, in KiB.
fn peak_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Resets `VmHWM` to the current resident size (Linux 4.0+).
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

#[test]
fn hostile_templates_fail_with_bounded_memory() {
    let chat = [Message::new("user", "hi")];
    // Warm up the allocator and the code paths.
    let t = ChatTemplate::named(NAME, "{{ messages[0].content }}", "", "").unwrap();
    assert_eq!(t.render(&chat, false).unwrap(), "hi");
    let start = peak_kib();
    for (label, src, says) in hostile() {
        let reset = reset_peak();
        let base = if reset { peak_kib() } else { start };
        let e = ChatTemplate::named(NAME, &src, "", "")
            .and_then(|t| t.render(&chat, true))
            .expect_err(label);
        assert!(
            matches!(&e, ModelError::Template { name, msg } if name == NAME && msg.contains(&says)),
            "{label}: {e}"
        );
        // The peak since the reset, above this case's start and above the
        // test's start (what the allocator kept from earlier cases counts).
        if let (Some(base), Some(start), Some(peak)) = (base, start, peak_kib()) {
            let grew = peak.saturating_sub(base) / 1024;
            let total = peak.saturating_sub(start) / 1024;
            eprintln!("{label}: peak +{grew} MiB ({total} MiB above the start)");
            assert!(
                grew < 256 && total < 256,
                "{label}: peak memory +{grew} MiB, {total} MiB"
            );
        }
    }
}
