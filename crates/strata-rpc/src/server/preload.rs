//! `--preload`: weights the server already has in local GGUF files, found by
//! the hash clients send in SET_TENSOR_HASH, so that they never cross the
//! network.
//!
//! ggml's client (and strata's) sends a tensor write by hash when it is
//! larger than [`HASH_THRESHOLD`](crate::proto::HASH_THRESHOLD) bytes and its
//! buffer holds weights; the hash is the 64-bit FNV-1a of the bytes written
//! ([`fnv1a`]). Model loaders write each weight whole, so the hash of every
//! tensor's bytes in the file is what its client will send. The files are
//! memory-mapped and never copied: a hit writes from the map straight into
//! the client's buffer. The index costs a few dozen bytes per tensor; the
//! mapped bytes are the kernel's page cache, reclaimable, read on demand.
//!
//! ```no_run
//! use strata_rpc::server::Preload;
//! let p = Preload::open(&["model.gguf".into()], strata_rpc::proto::HASH_THRESHOLD).unwrap();
//! println!("{} tensors, {} bytes", p.len(), p.bytes());
//! ```

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use strata::gguf::GgufFile;
use strata::{Error, Result, ResultExt};

use crate::proto::fnv1a;

/// Most files one server preloads (each holds a memory map open).
pub const MAX_FILES: usize = 1024;

/// Tensors of local GGUF files indexed by the hash of their bytes.
pub struct Preload {
    files: Vec<GgufFile>,
    /// Hash → (file index, byte range in the file's data section).
    index: HashMap<u64, (usize, Range<usize>)>,
    bytes: u64,
}

impl std::fmt::Debug for Preload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preload")
            .field("files", &self.files.len())
            .field("tensors", &self.index.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// The `.gguf` files `path` names: itself, or those directly inside it.
fn files_of(path: &Path) -> Result<Vec<PathBuf>> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::io(format!("--preload {}", path.display()), e))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let dir = std::fs::read_dir(path)
        .map_err(|e| Error::io(format!("--preload {}", path.display()), e))?;
    let mut out = Vec::new();
    for entry in dir {
        let p = entry
            .map_err(|e| Error::io(format!("--preload {}", path.display()), e))?
            .path();
        if p.extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("gguf"))
            && p.is_file()
        {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err(Error::BadValue {
            arg: "--preload".into(),
            value: path.display().to_string(),
            expected: "a .gguf file or a directory holding .gguf files".into(),
        });
    }
    out.sort();
    Ok(out)
}

impl Preload {
    /// Maps and indexes every tensor of more than `min_bytes` bytes in
    /// `paths` (GGUF files, or directories whose `.gguf` files are all
    /// taken). A missing, unreadable or malformed file is an error naming it.
    pub fn open(paths: &[PathBuf], min_bytes: usize) -> Result<Preload> {
        let mut names = Vec::new();
        for p in paths {
            names.extend(files_of(p)?);
        }
        if names.len() > MAX_FILES {
            return Err(Error::BadValue {
                arg: "--preload".into(),
                value: format!("{} files", names.len()),
                expected: format!("at most {MAX_FILES} .gguf files"),
            });
        }
        let mut files = Vec::with_capacity(names.len());
        for n in &names {
            files.push(
                GgufFile::open(n).with_context(|| format!("--preload: reading {}", n.display()))?,
            );
        }
        // (file, range) of every tensor to hash, checked against its file.
        let mut jobs: Vec<(usize, Range<usize>)> = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let data = f.data_section().len();
            for t in f.tensors() {
                let r = t.data_range();
                if r.end > data || r.start > r.end {
                    return Err(Error::BadValue {
                        arg: "--preload".into(),
                        value: format!("{}: tensor '{}' at {r:?}", names[i].display(), t.name()),
                        expected: format!("tensor data inside the data section ({data} bytes)"),
                    });
                }
                if r.len() > min_bytes {
                    jobs.push((i, r));
                }
            }
        }
        let hashes = hash_all(&files, &jobs);
        let mut index = HashMap::with_capacity(jobs.len());
        let mut bytes = 0u64;
        for ((i, r), h) in jobs.into_iter().zip(hashes) {
            bytes += r.len() as u64;
            index.entry(h).or_insert((i, r));
        }
        Ok(Preload {
            files,
            index,
            bytes,
        })
    }

    /// The bytes whose hash is `hash`, borrowed from the map.
    pub fn get(&self, hash: u64) -> Option<&[u8]> {
        let (i, r) = self.index.get(&hash)?;
        self.files.get(*i)?.data_section().get(r.clone())
    }

    /// Number of distinct tensors indexed.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// True when no tensor was large enough to index.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Bytes of the tensors indexed (mapped, not copied).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Number of files mapped.
    pub fn files(&self) -> usize {
        self.files.len()
    }
}

/// FNV-1a of every job's bytes, on all cores (FNV-1a is sequential within
/// one tensor, so tensors are spread over the threads).
fn hash_all(files: &[GgufFile], jobs: &[(usize, Range<usize>)]) -> Vec<u64> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out = vec![0u64; jobs.len()];
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((i, r)) = jobs.get(k) else {
                            break done;
                        };
                        done.push((k, fnv1a(&files[*i].data_section()[r.clone()])));
                    }
                })
            })
            .collect();
        for w in workers {
            // A worker only indexes checked ranges; should one fail anyway,
            // its tensors keep hash 0 and simply never hit.
            for (k, h) in w.join().unwrap_or_default() {
                out[k] = h;
            }
        }
    });
    out
}
