//! How long waiting threads spin ([`Poll`]) and how many cores there are.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// The cores this process may run on: [`std::thread::available_parallelism`],
/// which on Linux honours the calling thread's affinity mask (`taskset`,
/// cpusets) and the cgroup CPU quota (v1 and v2; a quota of 1.5 CPUs counts
/// as 1), and 1 when it cannot tell. It is recomputed at every call (a few
/// file reads): not for hot code.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How long waiting threads spin before they sleep: llama.cpp's `--poll`
/// level, 0 to 100 (0: sleep at once; the default 50 spins about 100 µs;
/// 100 spins longest, about 200 µs). Spinning answers fastest when the
/// awaited thread is running on another core; sleeping leaves the core to
/// other work (another process, or a pool thread the waiter would slow).
///
/// ```
/// use strata::cpu::Poll;
/// let p: Poll = "20".parse().unwrap();
/// assert_eq!(p.level(), 20);
/// assert!("101".parse::<Poll>().is_err());
/// assert_eq!(Poll::default(), Poll::DEFAULT);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Poll(pub(super) u8);

/// Spin time per poll level.
const SPIN_PER_LEVEL: Duration = Duration::from_micros(2);

impl Poll {
    /// No spinning: a waiter sleeps at once.
    pub const NONE: Poll = Poll(0);
    /// llama.cpp's default level, 50.
    pub const DEFAULT: Poll = Poll(50);
    /// The longest spin, level 100.
    pub const MAX: Poll = Poll(100);

    /// The level `level`.
    ///
    /// Errors: [`crate::Error::BadValue`] above 100.
    pub fn new(level: u64) -> crate::Result<Poll> {
        match u8::try_from(level) {
            Ok(l) if l <= Poll::MAX.0 => Ok(Poll(l)),
            _ => Err(crate::Error::BadValue {
                arg: "--poll".into(),
                value: level.to_string(),
                expected: "a polling level from 0 (sleep at once) to 100 (spin longest)".into(),
            }),
        }
    }

    /// The level, 0 to 100.
    pub fn level(self) -> u8 {
        self.0
    }

    /// How long a waiter spins before it sleeps.
    pub fn spin_time(self) -> Duration {
        SPIN_PER_LEVEL * u32::from(self.0)
    }
}

impl Default for Poll {
    fn default() -> Poll {
        Poll::DEFAULT
    }
}

impl std::fmt::Display for Poll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Poll {
    type Err = crate::Error;

    /// A level written in decimal, 0 to 100.
    fn from_str(s: &str) -> crate::Result<Poll> {
        let level = s
            .trim()
            .parse::<u64>()
            .map_err(|_| crate::Error::BadValue {
                arg: "--poll".into(),
                value: format!("'{s}'"),
                expected: "a polling level from 0 (sleep at once) to 100 (spin longest)".into(),
            })?;
        Poll::new(level)
    }
}

/// The process-wide default level ([`default_poll`]).
static DEFAULT_POLL: AtomicU8 = AtomicU8::new(Poll::DEFAULT.0);

/// The poll level pools start with when none is given ([`super::ThreadPool::new`],
/// every [`crate::cpu::CpuBackend`]): [`Poll::DEFAULT`] unless changed by
/// [`set_default_poll`].
pub fn default_poll() -> Poll {
    Poll(DEFAULT_POLL.load(Ordering::Relaxed))
}

/// Sets the poll level of the pools created from now on (the CLI's
/// `--poll`); running pools keep theirs ([`super::ThreadPool::set_poll`] changes one).
pub fn set_default_poll(poll: Poll) {
    DEFAULT_POLL.store(poll.0, Ordering::Relaxed);
}
