//! The dynamic allocator (ggml's `ggml_dyn_tallocr`): offsets only, no
//! memory. Free blocks are kept in offset order; allocation takes the
//! smallest free block that fits (best fit), freeing merges with neighbours,
//! and the high-water mark is the buffer size a plan needs.

use crate::backend::align_up;
use crate::{Error, Result};

/// A free range of a virtual buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeBlock {
    /// Start, in bytes.
    pub offset: usize,
    /// Length, in bytes.
    pub size: usize,
}

/// A best-fit allocator of offsets in an unbounded virtual buffer.
///
/// Like ggml's, the last free block is the unbounded tail: it is used only
/// when no other free block fits. Unlike ggml's, there is no fixed cap on
/// the number of free blocks.
///
/// ```
/// use strata::alloc::DynAllocator;
/// let mut d = DynAllocator::new(32);
/// let a = d.alloc(4).unwrap();   // 0
/// let b = d.alloc(40).unwrap();  // 32 (sizes are rounded up to 32)
/// let c = d.alloc(4).unwrap();   // 96
/// d.free(a, 4).unwrap();
/// d.free(c, 4).unwrap();         // merges with the tail
/// assert_eq!(d.alloc(10).unwrap(), 0); // best fit: the hole at 0
/// assert_eq!((a, b, c), (0, 32, 96));
/// assert_eq!(d.max_size(), 128);
/// assert!(d.free(c, 4).is_err()); // a double free is an error
/// ```
#[derive(Clone, Debug)]
pub struct DynAllocator {
    alignment: usize,
    free: Vec<FreeBlock>,
    max_size: usize,
}

/// Size of the unbounded tail block (ggml: SIZE_MAX / 2).
const TAIL: usize = usize::MAX / 2;

impl DynAllocator {
    /// An empty allocator whose sizes are rounded up to `alignment` (a power of two).
    pub fn new(alignment: usize) -> DynAllocator {
        let alignment = alignment.max(1).next_power_of_two();
        DynAllocator {
            alignment,
            free: vec![FreeBlock {
                offset: 0,
                size: TAIL,
            }],
            max_size: 0,
        }
    }

    /// Forgets every allocation.
    pub fn reset(&mut self) {
        *self = DynAllocator::new(self.alignment);
    }

    /// The alignment.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// The free blocks, in offset order (the last is the unbounded tail).
    pub fn free_blocks(&self) -> &[FreeBlock] {
        &self.free
    }

    /// The high-water mark: the buffer size every allocation so far fits in.
    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// Allocates `size` bytes (rounded up to the alignment); returns the offset.
    /// A size beyond the virtual buffer (`usize::MAX / 2` in all) is an error.
    pub fn alloc(&mut self, size: usize) -> Result<usize> {
        let last = self.free.len() - 1;
        let tail = self.free[last].size;
        let size = align_up(size.min(TAIL + 1), self.alignment);
        if size > tail {
            return Err(Error::OutOfMemory {
                buffer_type: "dynamic allocator".into(),
                requested: size,
                msg: format!("only {tail} bytes of address space are left"),
            });
        }
        // Best fit among the bounded blocks; the tail only when none fits.
        let best = self.free[..last]
            .iter()
            .enumerate()
            .filter(|(_, b)| b.size >= size)
            .min_by_key(|(_, b)| b.size)
            .map_or(last, |(i, _)| i);
        let block = &mut self.free[best];
        let offset = block.offset;
        block.offset += size;
        block.size -= size;
        if block.size == 0 && best != last {
            self.free.remove(best);
        }
        self.max_size = self.max_size.max(offset + size);
        Ok(offset)
    }

    /// Returns `size` bytes at `offset` (as given to / returned by
    /// [`DynAllocator::alloc`]). Freeing bytes that are already free is an
    /// error and changes nothing.
    pub fn free(&mut self, offset: usize, size: usize) -> Result<()> {
        let size = align_up(size.min(TAIL), self.alignment);
        if size == 0 {
            return Ok(());
        }
        // First block starting after the freed range.
        let i = self.free.partition_point(|b| b.offset < offset);
        let end = offset.saturating_add(size);
        let overlaps_prev = i > 0 && {
            let p = self.free[i - 1];
            p.offset + p.size > offset
        };
        let overlaps_next = i < self.free.len() && self.free[i].offset < end;
        if overlaps_prev || overlaps_next || !offset.is_multiple_of(self.alignment) {
            return Err(Error::InvalidArgument(format!(
                "dynamic allocator: {offset}..{end} was not allocated (double free or wrong range)"
            )));
        }
        let merge_prev = i > 0 && {
            let p = self.free[i - 1];
            p.offset + p.size == offset
        };
        let merge_next = i < self.free.len() && end == self.free[i].offset;
        match (merge_prev, merge_next) {
            (true, true) => {
                let next = self.free.remove(i);
                self.free[i - 1].size += size + next.size;
            }
            (true, false) => self.free[i - 1].size += size,
            (false, true) => {
                self.free[i].offset = offset;
                self.free[i].size += size;
            }
            (false, false) => self.free.insert(i, FreeBlock { offset, size }),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_prefers_the_smallest_hole() {
        let mut d = DynAllocator::new(16);
        let a = d.alloc(64).unwrap();
        let _x = d.alloc(16).unwrap();
        let b = d.alloc(32).unwrap();
        let _y = d.alloc(16).unwrap();
        d.free(a, 64).unwrap();
        d.free(b, 32).unwrap();
        // holes: 64 at 0, 32 at 80; a 20-byte request takes the 32-byte hole
        assert_eq!(d.alloc(20).unwrap(), b);
        assert_eq!(d.alloc(48).unwrap(), a);
        assert_eq!(d.max_size(), 128);
    }

    #[test]
    fn free_merges_with_both_neighbours_and_the_tail() {
        let mut d = DynAllocator::new(8);
        let offs: Vec<usize> = (0..4).map(|_| d.alloc(8).unwrap()).collect();
        assert_eq!(offs, [0, 8, 16, 24]);
        d.free(0, 8).unwrap();
        d.free(16, 8).unwrap();
        assert_eq!(d.free_blocks().len(), 3);
        d.free(8, 8).unwrap(); // joins 0..8 and 16..24
        assert_eq!(
            d.free_blocks()[0],
            FreeBlock {
                offset: 0,
                size: 24
            }
        );
        d.free(24, 8).unwrap(); // joins everything with the tail
        assert_eq!(d.free_blocks().len(), 1);
        assert_eq!(d.free_blocks()[0].offset, 0);
        assert_eq!(d.max_size(), 32);
    }

    #[test]
    fn alignment_rounds_sizes() {
        let mut d = DynAllocator::new(32);
        assert_eq!(d.alloc(1).unwrap(), 0);
        assert_eq!(d.alloc(33).unwrap(), 32);
        assert_eq!(d.alloc(0).unwrap(), 96);
        assert_eq!(d.max_size(), 96);
    }

    #[test]
    fn no_cap_on_free_blocks() {
        // ggml's dyn allocator has at most 256 free blocks; this one has none.
        let mut d = DynAllocator::new(1);
        let offs: Vec<usize> = (0..2000).map(|_| d.alloc(1).unwrap()).collect();
        for o in offs.iter().step_by(2) {
            d.free(*o, 1).unwrap();
        }
        assert_eq!(d.free_blocks().len(), 1001);
        for (i, o) in offs.iter().step_by(2).enumerate() {
            assert_eq!(d.free_blocks()[i].offset, *o);
        }
        assert_eq!(d.max_size(), 2000);
        // double frees and oversized requests are errors, not corruption
        assert!(d.free(0, 1).is_err());
        assert!(d.free(1, 2).is_err());
        assert!(d.alloc(usize::MAX).is_err());
        assert_eq!(d.free_blocks().len(), 1001);
        d.reset();
        assert_eq!(d.free_blocks().len(), 1);
        assert_eq!(d.max_size(), 0);
    }
}
