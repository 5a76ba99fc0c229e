//! The KV cache's cells, llama.cpp's unified cache: one pool of `n_ctx`
//! cells shared by every sequence. A cell holds one position and the set of
//! sequences that see it; a cell in several sets is one copy of a prefix they
//! share ([`Cells::seq_cp`]). This module is the bookkeeping only (no
//! tensors): which cells are free, which a batch's tokens go to, and the
//! sequence operations (`seq_rm`, `seq_cp`, `seq_keep`, `seq_add`).
//!
//! Invariant kept by every operation (checked by [`Cells::check`]): a cell is
//! used exactly when its sequence set is non-empty; `used` counts those
//! cells; per sequence, the position counts and the cell list agree with a
//! scan of the cells.
//!
//! Cell order: [`Cells::find_slots`] gives each token a free cell above every
//! cell of its sequences where one exists, so a sequence's cells stay in
//! position order. Attention visits a row's keys in cell order, so this is
//! what makes a sequence's logits independent of the cells' offsets (the
//! batch-invariance contract of [`crate::context`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, RangeBounds};

use crate::{BatchError, ModelError, Result};

/// A sequence id (llama.cpp's `llama_seq_id`, without its negative "all").
pub type SeqId = u32;

/// The most sequences a cache can be made for (llama.cpp's `LLAMA_MAX_SEQ`).
pub const MAX_SEQ: usize = 256;

/// A set of sequence ids below [`MAX_SEQ`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SeqSet([u64; MAX_SEQ / 64]);

impl SeqSet {
    /// The empty set.
    pub const EMPTY: SeqSet = SeqSet([0; MAX_SEQ / 64]);

    /// The set of one sequence (`s < MAX_SEQ`).
    pub fn one(s: SeqId) -> SeqSet {
        let mut set = SeqSet::EMPTY;
        set.insert(s);
        set
    }

    /// Adds `s` (ids at or above [`MAX_SEQ`] are ignored: callers validate first).
    pub fn insert(&mut self, s: SeqId) {
        if let Some(w) = self.0.get_mut(s as usize / 64) {
            *w |= 1 << (s % 64);
        }
    }

    /// Removes `s`.
    pub fn remove(&mut self, s: SeqId) {
        if let Some(w) = self.0.get_mut(s as usize / 64) {
            *w &= !(1 << (s % 64));
        }
    }

    /// True when `s` is in the set.
    pub fn contains(&self, s: SeqId) -> bool {
        self.0
            .get(s as usize / 64)
            .is_some_and(|w| w & (1 << (s % 64)) != 0)
    }

    /// True when no sequence is in the set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// Number of sequences in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The sequences, ascending.
    pub fn iter(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros();
                    w &= w - 1;
                    (i * 64) as SeqId + b
                })
            })
        })
    }

    /// The lowest sequence in the set.
    pub fn first(&self) -> Option<SeqId> {
        self.0
            .iter()
            .enumerate()
            .find(|(_, &w)| w != 0)
            .map(|(i, w)| (i * 64) as SeqId + w.trailing_zeros())
    }
}

/// The cells of a cache: position and sequence set of each.
#[derive(Clone, Debug)]
pub struct Cells {
    pos: Vec<i32>,
    seqs: Vec<SeqSet>,
    used: usize,
    n_seq_max: usize,
    /// Per sequence: position → number of its cells at that position.
    seq_pos: Vec<BTreeMap<i32, u32>>,
    /// Per sequence: its cells.
    seq_cells: Vec<BTreeSet<usize>>,
}

/// `range` as a half-open `[p0, p1)` over i32 (open ends become the i32 limits).
fn bounds(range: &impl RangeBounds<i32>) -> (i64, i64) {
    let p0 = match range.start_bound() {
        Bound::Included(&p) => p as i64,
        Bound::Excluded(&p) => p as i64 + 1,
        Bound::Unbounded => i64::MIN,
    };
    let p1 = match range.end_bound() {
        Bound::Included(&p) => p as i64 + 1,
        Bound::Excluded(&p) => p as i64,
        Bound::Unbounded => i64::MAX,
    };
    (p0, p1)
}

impl Cells {
    /// `n_ctx` free cells for sequences `0..n_seq_max` (1..=[`MAX_SEQ`]).
    pub fn new(n_ctx: usize, n_seq_max: usize) -> Result<Cells> {
        if n_seq_max == 0 || n_seq_max > MAX_SEQ {
            return Err(ModelError::SeqCount {
                n_seq_max,
                max: MAX_SEQ,
            });
        }
        Ok(Cells {
            pos: vec![0; n_ctx],
            seqs: vec![SeqSet::EMPTY; n_ctx],
            used: 0,
            n_seq_max,
            seq_pos: vec![BTreeMap::new(); n_seq_max],
            seq_cells: vec![BTreeSet::new(); n_seq_max],
        })
    }

    /// Number of cells.
    pub fn size(&self) -> usize {
        self.pos.len()
    }

    /// Sequences the cache is made for.
    pub fn n_seq_max(&self) -> usize {
        self.n_seq_max
    }

    /// Cells in use (holding at least one sequence).
    pub fn used(&self) -> usize {
        self.used
    }

    /// One past the highest cell of any of `seqs` (0 when they have none):
    /// the cells a batch of these sequences' tokens can see.
    pub fn span_of(&self, seqs: impl IntoIterator<Item = SeqId>) -> usize {
        seqs.into_iter()
            .filter_map(|s| self.seq_cells.get(s as usize)?.last())
            .max()
            .map_or(0, |&c| c + 1)
    }

    /// One past the highest used cell (0 when all are free).
    pub fn used_max_p1(&self) -> usize {
        self.seq_cells
            .iter()
            .filter_map(|c| c.last())
            .max()
            .map_or(0, |&c| c + 1)
    }

    /// True when cell `i` holds no sequence (cells past the end are not free).
    pub fn is_free(&self, i: usize) -> bool {
        self.seqs.get(i).is_some_and(SeqSet::is_empty)
    }

    /// Position and sequences of cell `i` when it is used.
    pub fn cell(&self, i: usize) -> Option<(i32, SeqSet)> {
        let set = *self.seqs.get(i)?;
        (!set.is_empty()).then(|| (self.pos[i], set))
    }

    /// The cells of sequence `s`, ascending.
    pub fn seq_cells(&self, s: SeqId) -> impl Iterator<Item = usize> + '_ {
        self.seq_cells
            .get(s as usize)
            .into_iter()
            .flat_map(|c| c.iter().copied())
    }

    /// Lowest position of sequence `s` (`None`: it has no cells).
    pub fn seq_pos_min(&self, s: SeqId) -> Option<i32> {
        self.seq_pos
            .get(s as usize)
            .and_then(|m| m.keys().next().copied())
    }

    /// Highest position of sequence `s` (`None`: it has no cells).
    pub fn seq_pos_max(&self, s: SeqId) -> Option<i32> {
        self.seq_pos
            .get(s as usize)
            .and_then(|m| m.keys().next_back().copied())
    }

    /// A typed error unless `s` is one of this cache's sequences.
    pub fn check_seq(&self, s: SeqId) -> Result<()> {
        if (s as usize) < self.n_seq_max {
            Ok(())
        } else {
            Err(BatchError::SeqOutOfRange {
                seq: s,
                n_seq_max: self.n_seq_max,
            }
            .into())
        }
    }

    fn add_seq(&mut self, i: usize, s: SeqId) {
        if self.seqs[i].contains(s) {
            return;
        }
        if self.seqs[i].is_empty() {
            self.used += 1;
        }
        self.seqs[i].insert(s);
        *self.seq_pos[s as usize].entry(self.pos[i]).or_insert(0) += 1;
        self.seq_cells[s as usize].insert(i);
    }

    fn remove_seq(&mut self, i: usize, s: SeqId) {
        if !self.seqs[i].contains(s) {
            return;
        }
        self.seqs[i].remove(s);
        if self.seqs[i].is_empty() {
            self.used -= 1;
        }
        let m = &mut self.seq_pos[s as usize];
        if let Some(c) = m.get_mut(&self.pos[i]) {
            *c -= 1;
            if *c == 0 {
                m.remove(&self.pos[i]);
            }
        }
        self.seq_cells[s as usize].remove(&i);
    }

    /// Frees every cell.
    pub fn clear(&mut self) {
        self.seqs.fill(SeqSet::EMPTY);
        self.used = 0;
        self.seq_pos.iter_mut().for_each(BTreeMap::clear);
        self.seq_cells.iter_mut().for_each(BTreeSet::clear);
    }

    /// Removes sequence `seq` (every sequence for `None`) from its cells with
    /// positions in `range`. A cell another sequence also holds stays, for
    /// that sequence (llama.cpp's `seq_rm`).
    pub fn seq_rm(&mut self, seq: Option<SeqId>, range: impl RangeBounds<i32>) -> Result<()> {
        if let Some(s) = seq {
            self.check_seq(s)?;
        }
        let (p0, p1) = bounds(&range);
        let cells: Vec<usize> = match seq {
            Some(s) => self.seq_cells[s as usize].iter().copied().collect(),
            None => (0..self.size()).filter(|&i| !self.is_free(i)).collect(),
        };
        for i in cells {
            let p = self.pos[i] as i64;
            if p < p0 || p >= p1 {
                continue;
            }
            match seq {
                Some(s) => self.remove_seq(i, s),
                None => {
                    for s in self.seqs[i].iter().collect::<Vec<_>>() {
                        self.remove_seq(i, s);
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds `dst` to the cells of `src` with positions in `range`: `dst`
    /// shares them, no K/V is copied (llama.cpp's `seq_cp` on its unified cache).
    pub fn seq_cp(&mut self, src: SeqId, dst: SeqId, range: impl RangeBounds<i32>) -> Result<()> {
        self.check_seq(src)?;
        self.check_seq(dst)?;
        if src == dst {
            return Ok(());
        }
        let (p0, p1) = bounds(&range);
        let cells: Vec<usize> = self.seq_cells[src as usize].iter().copied().collect();
        for i in cells {
            let p = self.pos[i] as i64;
            if p >= p0 && p < p1 {
                self.add_seq(i, dst);
            }
        }
        Ok(())
    }

    /// Removes every sequence but `seq` from every cell.
    pub fn seq_keep(&mut self, seq: SeqId) -> Result<()> {
        self.check_seq(seq)?;
        for s in 0..self.n_seq_max as SeqId {
            if s != seq {
                self.seq_rm(Some(s), ..)?;
            }
        }
        Ok(())
    }

    /// Adds `delta` to the positions of the cells of `seq` in `range`
    /// (llama.cpp's `seq_add`). A cell has one position, so a cell `seq`
    /// shares with other sequences moves for them too, as in llama.cpp. A
    /// cell whose position would become negative is freed. Returns the cells
    /// that moved with their shift, for re-rotating their keys.
    pub fn seq_add(
        &mut self,
        seq: SeqId,
        range: impl RangeBounds<i32>,
        delta: i32,
    ) -> Result<Vec<(usize, i32)>> {
        self.check_seq(seq)?;
        if delta == 0 {
            return Ok(Vec::new());
        }
        let (p0, p1) = bounds(&range);
        let cells: Vec<usize> = self.seq_cells[seq as usize]
            .iter()
            .copied()
            .filter(|&i| (self.pos[i] as i64) >= p0 && (self.pos[i] as i64) < p1)
            .collect();
        // positions past i32 are refused before anything changes
        for &i in &cells {
            if self.pos[i].checked_add(delta).is_none() {
                return Err(BatchError::ShiftOverflow {
                    seq,
                    pos: self.pos[i],
                    delta,
                }
                .into());
            }
        }
        let mut moved = Vec::with_capacity(cells.len());
        for i in cells {
            let members: Vec<SeqId> = self.seqs[i].iter().collect();
            for &s in &members {
                self.remove_seq(i, s);
            }
            let new = self.pos[i] + delta;
            if new < 0 {
                continue; // freed
            }
            self.pos[i] = new;
            for &s in &members {
                self.add_seq(i, s);
            }
            moved.push((i, delta));
        }
        Ok(moved)
    }

    /// Free cells for tokens `(position, sequences)`, in order, without
    /// taking them. Each token gets the lowest free cell above the cells its
    /// sequences already hold (and above the cells of earlier tokens of the
    /// same sequences) where there is one, else the lowest free cell.
    /// `Err` when there are fewer free cells than tokens.
    pub fn find_slots(&self, tokens: &[(i32, SeqSet)]) -> Result<Vec<usize>> {
        let free = self.size() - self.used;
        if tokens.len() > free {
            return Err(BatchError::NoFreeCells {
                needed: tokens.len(),
                free,
                size: self.size(),
            }
            .into());
        }
        let mut taken = BTreeSet::new();
        // the highest cell each sequence holds, including this batch's
        let mut top: Vec<Option<usize>> =
            self.seq_cells.iter().map(|c| c.last().copied()).collect();
        let mut out = Vec::with_capacity(tokens.len());
        // the lowest cell that may still be free (cells below are used or taken)
        let mut low = 0;
        for (_, set) in tokens {
            let above = set
                .iter()
                .filter_map(|s| top.get(s as usize).copied().flatten())
                .max()
                .map_or(0, |c| c + 1);
            let pick = |from: usize| {
                (from.max(low)..self.size()).find(|&i| self.is_free(i) && !taken.contains(&i))
            };
            let Some(i) = pick(above).or_else(|| pick(0)) else {
                // counted above: cannot happen, but stay an error
                return Err(BatchError::NoFreeCells {
                    needed: tokens.len(),
                    free,
                    size: self.size(),
                }
                .into());
            };
            taken.insert(i);
            while low < self.size() && (!self.is_free(low) || taken.contains(&low)) {
                low += 1;
            }
            for s in set.iter() {
                if let Some(t) = top.get_mut(s as usize) {
                    *t = Some(t.map_or(i, |c| c.max(i)));
                }
            }
            out.push(i);
        }
        Ok(out)
    }

    /// Finds cells for `tokens` ([`Cells::find_slots`]) and puts them there;
    /// returns the cells. `Err` (nothing placed) when too few are free.
    pub fn place(&mut self, tokens: &[(i32, SeqSet)]) -> Result<Vec<usize>> {
        let slots = self.find_slots(tokens)?;
        self.apply(tokens, &slots);
        Ok(slots)
    }

    /// Puts token `k` of `tokens` into cell `slots[k]` (cells from
    /// [`Cells::find_slots`], free).
    pub(crate) fn apply(&mut self, tokens: &[(i32, SeqSet)], slots: &[usize]) {
        for (&(p, set), &i) in tokens.iter().zip(slots) {
            debug_assert!(self.is_free(i), "cell {i} is not free");
            self.pos[i] = p;
            for s in set.iter() {
                self.add_seq(i, s);
            }
        }
    }

    /// Frees cells `slots` (undoes [`Cells::apply`]).
    pub(crate) fn release(&mut self, slots: &[usize]) {
        for &i in slots {
            for s in self.seqs[i].iter().collect::<Vec<_>>() {
                self.remove_seq(i, s);
            }
        }
    }

    /// Checks the invariants against a scan of the cells (tests).
    pub fn check(&self) -> std::result::Result<(), String> {
        let used = self.seqs.iter().filter(|s| !s.is_empty()).count();
        if used != self.used {
            return Err(format!(
                "used {} but {used} cells hold sequences",
                self.used
            ));
        }
        for s in 0..self.n_seq_max {
            let mut pos: BTreeMap<i32, u32> = BTreeMap::new();
            let mut cells = BTreeSet::new();
            for i in 0..self.size() {
                if self.seqs[i].contains(s as SeqId) {
                    *pos.entry(self.pos[i]).or_insert(0) += 1;
                    cells.insert(i);
                }
            }
            if pos != self.seq_pos[s] {
                return Err(format!(
                    "sequence {s}: position counts disagree with the cells"
                ));
            }
            if cells != self.seq_cells[s] {
                return Err(format!("sequence {s}: cell list disagrees with the cells"));
            }
        }
        if self
            .seqs
            .iter()
            .any(|set| set.iter().any(|s| s as usize >= self.n_seq_max))
        {
            return Err("a cell holds a sequence beyond n_seq_max".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(seq: SeqId, p0: i32, n: i32) -> Vec<(i32, SeqSet)> {
        (p0..p0 + n).map(|p| (p, SeqSet::one(seq))).collect()
    }

    fn put(c: &mut Cells, t: &[(i32, SeqSet)]) -> Vec<usize> {
        let s = c.find_slots(t).unwrap();
        c.apply(t, &s);
        c.check().unwrap();
        s
    }

    #[test]
    fn seq_set_basics() {
        let mut s = SeqSet::EMPTY;
        assert!(s.is_empty());
        s.insert(3);
        s.insert(200);
        s.insert(300); // ignored
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![3, 200]);
        assert_eq!(s.first(), Some(3));
        assert_eq!(s.len(), 2);
        s.remove(3);
        assert_eq!(s.first(), Some(200));
        assert!(!s.contains(3) && s.contains(200) && !s.contains(300));
        // the word boundaries
        let mut w = SeqSet::EMPTY;
        for id in [255, 64, 63, 0, 128] {
            w.insert(id);
        }
        assert_eq!(w.iter().collect::<Vec<_>>(), vec![0, 63, 64, 128, 255]);
        assert_eq!(w.len(), 5);
    }

    #[test]
    fn cells_outside_the_cache_are_none_not_a_panic() {
        let mut c = Cells::new(4, 1).unwrap();
        c.place(&toks(0, 7, 1)).unwrap();
        assert_eq!(c.cell(0), Some((7, SeqSet::one(0))));
        assert_eq!(c.cell(1), None);
        assert_eq!(c.cell(99), None);
        assert!(!c.is_free(99));
    }

    #[test]
    fn shared_prefix_is_one_copy_and_rm_keeps_the_other() {
        let mut c = Cells::new(32, 4).unwrap();
        put(&mut c, &toks(0, 0, 10));
        c.seq_cp(0, 1, ..).unwrap();
        c.seq_cp(0, 2, 0..5).unwrap();
        assert_eq!(c.used(), 10);
        assert_eq!(c.seq_pos_max(1), Some(9));
        assert_eq!(c.seq_pos_max(2), Some(4));
        c.check().unwrap();
        // removing seq 0's whole range leaves seqs 1 and 2 intact
        c.seq_rm(Some(0), ..).unwrap();
        assert_eq!(c.used(), 10);
        assert_eq!(c.seq_pos_min(0), None);
        assert_eq!(c.seq_pos_max(1), Some(9));
        c.seq_rm(Some(1), 5..).unwrap();
        assert_eq!(c.used(), 5);
        c.seq_keep(2).unwrap();
        assert_eq!(c.seq_pos_max(1), None);
        assert_eq!(c.used(), 5);
        c.seq_rm(None, ..).unwrap();
        assert_eq!(c.used(), 0);
        c.check().unwrap();
    }

    #[test]
    fn slots_keep_each_sequence_in_cell_order() {
        let mut c = Cells::new(16, 3).unwrap();
        let a = put(&mut c, &toks(0, 0, 4)); // cells 0..4
        let b = put(&mut c, &toks(1, 0, 4)); // cells 4..8
        assert_eq!(a, vec![0, 1, 2, 3]);
        assert_eq!(b, vec![4, 5, 6, 7]);
        c.seq_rm(Some(0), 2..).unwrap(); // frees 2, 3
                                         // seq 0 may reuse its holes (above its cell 1); seq 1 must go above 7
        let next = c
            .find_slots(&[(2, SeqSet::one(0)), (4, SeqSet::one(1))])
            .unwrap();
        assert_eq!(next, vec![2, 8]);
        // a new sequence takes the lowest hole
        assert_eq!(c.find_slots(&toks(2, 0, 1)).unwrap(), vec![2]);
    }

    #[test]
    fn full_cache_is_an_error_and_changes_nothing() {
        let mut c = Cells::new(4, 2).unwrap();
        put(&mut c, &toks(0, 0, 3));
        let before = format!("{c:?}");
        let e = c.find_slots(&toks(1, 0, 2)).unwrap_err().to_string();
        assert!(e.contains("needs 2 cells but only 1 of 4"), "{e}");
        assert_eq!(format!("{c:?}"), before);
        assert!(c.seq_rm(Some(2), ..).is_err());
        assert!(Cells::new(4, 0).is_err() && Cells::new(4, MAX_SEQ + 1).is_err());
    }

    #[test]
    fn seq_add_moves_and_frees() {
        let mut c = Cells::new(8, 2).unwrap();
        put(&mut c, &toks(0, 0, 6));
        let moved = c.seq_add(0, 3.., -3).unwrap();
        assert_eq!(moved.len(), 3);
        // positions 0..3 and 0..3 again: 0,1,2 now each held twice
        assert_eq!(c.seq_pos_max(0), Some(2));
        c.check().unwrap();
        let moved = c.seq_add(0, ..2, -1).unwrap(); // pos 0 cells freed, pos 1 → 0
        assert_eq!(moved.len(), 2);
        assert_eq!(c.used(), 4);
        c.check().unwrap();
        let before = format!("{c:?}");
        assert!(c.seq_add(0, .., i32::MAX).is_err());
        assert_eq!(format!("{c:?}"), before);
        c.check().unwrap();
    }
}
