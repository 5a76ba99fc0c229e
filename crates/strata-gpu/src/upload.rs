//! Writing host bytes into device memory through one persistent upload
//! buffer. `Queue::write_buffer` makes a staging buffer of its own for
//! every write (a buffer, its memory and a mapping: a decode token's four
//! input copies spent tens of µs there). Small writes are instead copied
//! into this buffer while it is mapped, and the next submission, whatever
//! it is, first copies them to their places, then asks for the buffer to be
//! mapped again once the device is done with it. While it is not mapped
//! (the device has not finished the last submission) or a write does not
//! fit, writes go through `Queue::write_buffer` as before.
//!
//! Order: wgpu runs the writes of `Queue::write_buffer` before the command
//! buffers of the next submission, so a write that takes that path while
//! copies wait here submits them first; the lock on [`Uploads`] is held
//! across both and across every submission, so no write slips between.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use strata::{Error, Result};

use crate::context::{lock, GpuContext};
use crate::counters::Count;
use crate::readback::{map_state, DONE, FAILED};

/// The upload buffer's size.
const UPLOAD_BYTES: u64 = 64 << 10;

/// A write waiting in the upload buffer: its destination, where in the
/// destination, where in the upload buffer, and how many bytes.
struct Pending {
    dst: wgpu::Buffer,
    offset: u64,
    at: u64,
    len: u64,
}

/// The upload buffer and the writes it holds.
#[derive(Default)]
pub(crate) struct Uploads {
    buf: Option<wgpu::Buffer>,
    /// The state of the map asked for after the last submission that
    /// copied out of `buf` (`None`: mapped since it was made).
    map: Option<Arc<AtomicU8>>,
    /// Bytes of `buf` holding pending writes.
    used: u64,
    pending: Vec<Pending>,
}

impl Uploads {
    /// Whether `buf` is mapped now (its last map, if any, is done). A map
    /// that failed leaves the buffer in a state this side cannot know: it
    /// is dropped, and the next write makes a new one.
    fn mapped(&mut self) -> bool {
        match self.map.as_ref().map(|s| s.load(Ordering::Acquire)) {
            None => self.buf.is_some(),
            Some(DONE) => true,
            Some(FAILED) => {
                self.buf = None;
                self.map = None;
                false
            }
            Some(_) => false,
        }
    }
}

impl GpuContext {
    /// Writes `data` at `offset` of `buf` (both 4-byte aligned), through the
    /// upload buffer when it is mapped and has room, else through
    /// `Queue::write_buffer` after the writes waiting in it.
    pub(crate) fn write_aligned(&self, buf: &wgpu::Buffer, offset: u64, data: &[u8]) -> Result<()> {
        let mut u = lock(&self.uploads);
        let len = data.len() as u64;
        if u.buf.is_none() && len <= UPLOAD_BYTES / 4 {
            u.buf = Some(self.new_buffer(&wgpu::BufferDescriptor {
                label: Some("strata uploads"),
                size: UPLOAD_BYTES,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            }));
            u.map = None;
            u.used = 0;
        }
        // map ranges start at multiples of 8
        let at = u.used.next_multiple_of(8);
        if len <= UPLOAD_BYTES / 4 && at + len <= UPLOAD_BYTES && u.mapped() {
            if let Some(b) = &u.buf {
                let mut view =
                    b.get_mapped_range_mut(at..at + len)
                        .map_err(|e| Error::Backend {
                            backend: self.name.clone(),
                            msg: format!("writing device memory failed: {e}"),
                        })?;
                view.copy_from_slice(data);
                drop(view);
                u.pending.push(Pending {
                    dst: buf.clone(),
                    offset,
                    at,
                    len,
                });
                u.used = at + len;
                self.count(Count::WritesStaged, 1);
                return Ok(());
            }
        }
        if !u.pending.is_empty() {
            self.submit_locked(&mut u, []);
        }
        self.queue.write_buffer(buf, offset, data);
        self.count(Count::WritesDirect, 1);
        Ok(())
    }

    /// Submits `cmds` after the copies of the writes waiting in the upload
    /// buffer, in one submission (counted and timed), with the uploads' lock
    /// held; then asks for the upload buffer to be mapped again. Returns the
    /// submission's index and ordinal.
    pub(crate) fn submit_locked(
        &self,
        u: &mut Uploads,
        cmds: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> (wgpu::SubmissionIndex, u64) {
        let t = std::time::Instant::now();
        let idx = self.submit_uploads(u, cmds);
        let ordinal = self.note_submit(t);
        (idx, ordinal)
    }

    fn submit_uploads(
        &self,
        u: &mut Uploads,
        cmds: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> wgpu::SubmissionIndex {
        let copies = match (&u.buf, u.pending.is_empty()) {
            (Some(b), false) => {
                b.unmap();
                let mut enc = self
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("strata uploads"),
                    });
                for p in u.pending.drain(..) {
                    enc.copy_buffer_to_buffer(b, p.at, &p.dst, p.offset, p.len);
                }
                Some(enc.finish())
            }
            _ => None,
        };
        let Some(copies) = copies else {
            return self.queue.submit(cmds);
        };
        let idx = self.queue.submit(std::iter::once(copies).chain(cmds));
        u.used = 0;
        if let Some(b) = &u.buf {
            u.map = Some(map_state(b, wgpu::MapMode::Write, ..));
        }
        idx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::readback::PENDING;

    #[test]
    fn a_failed_map_drops_the_buffer_and_a_pending_one_is_not_mapped() {
        let mut u = Uploads::default();
        assert!(!u.mapped(), "no buffer");
        u.map = Some(Arc::new(AtomicU8::new(PENDING)));
        assert!(!u.mapped());
        u.map = Some(Arc::new(AtomicU8::new(FAILED)));
        assert!(!u.mapped());
        assert!(u.map.is_none() && u.buf.is_none());
    }
}
