//! A batch of tokens from many sequences (llama.cpp's `llama_batch`): per
//! token its id, position, sequences and whether its logits are wanted.

use crate::cells::{SeqId, SeqSet};

/// Tokens of one or more sequences, decoded together by
/// [`crate::Context::decode_batch`].
///
/// ```
/// use strata_models::Batch;
/// let mut b = Batch::new();
/// // a 3-token prompt of sequence 0, then the next token of sequence 1
/// for (i, &t) in [1u32, 2, 3].iter().enumerate() {
///     b.add(t, i as i32, &[0], i == 2);
/// }
/// b.add(42, 7, &[1], true);
/// assert_eq!(b.len(), 4);
/// assert_eq!(b.n_outputs(), 2);
/// assert_eq!(b.get(3).map(|(t, p, _, l)| (t, p, l)), Some((42, 7, true)));
/// assert_eq!(b.get(4), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub(crate) tokens: Vec<u32>,
    pub(crate) pos: Vec<i32>,
    pub(crate) seqs: Vec<SeqSet>,
    pub(crate) logits: Vec<bool>,
    /// Sequence ids as given (ids at or above [`crate::cells::MAX_SEQ`]
    /// cannot be held by a [`SeqSet`]; kept to be reported).
    pub(crate) bad_seq: Vec<Option<SeqId>>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// Appends `token` at position `pos` of the sequences `seq_ids` (one
    /// cell holds it for all of them), asking for its logits when `logits`.
    pub fn add(&mut self, token: u32, pos: i32, seq_ids: &[SeqId], logits: bool) -> &mut Batch {
        let mut set = SeqSet::EMPTY;
        let mut bad = None;
        for &s in seq_ids {
            if (s as usize) < crate::cells::MAX_SEQ {
                set.insert(s);
            } else {
                bad.get_or_insert(s);
            }
        }
        self.tokens.push(token);
        self.pos.push(pos);
        self.seqs.push(set);
        self.logits.push(logits);
        self.bad_seq.push(bad);
        self
    }

    /// Appends `tokens` of sequence `seq` at positions `pos0..`, asking for
    /// the logits of the last one when `logits_last`.
    pub fn add_seq(
        &mut self,
        tokens: &[u32],
        pos0: i32,
        seq: SeqId,
        logits_last: bool,
    ) -> &mut Batch {
        for (i, &t) in tokens.iter().enumerate() {
            let last = i + 1 == tokens.len();
            self.add(
                t,
                pos0.saturating_add(i as i32),
                &[seq],
                logits_last && last,
            );
        }
        self
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when the batch has no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Tokens whose logits are wanted.
    pub fn n_outputs(&self) -> usize {
        self.logits.iter().filter(|&&l| l).count()
    }

    /// Removes every token.
    pub fn clear(&mut self) {
        *self = Batch::default();
    }

    /// Token `i`: its id, position, sequences and whether its logits are
    /// wanted (`None` past the end).
    pub fn get(&self, i: usize) -> Option<(u32, i32, SeqSet, bool)> {
        Some((
            *self.tokens.get(i)?,
            self.pos[i],
            self.seqs[i],
            self.logits[i],
        ))
    }
}

/// The logits a [`Batch`] asked for: one row of `n_vocab` per token whose
/// logits were wanted, in batch order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchLogits {
    pub(crate) n_vocab: usize,
    /// Batch index of each row.
    pub(crate) rows: Vec<usize>,
    pub(crate) data: Vec<f32>,
}

impl BatchLogits {
    /// The logits of batch token `i` (`None` when they were not asked for).
    pub fn get(&self, i: usize) -> Option<&[f32]> {
        let r = self.rows.binary_search(&i).ok()?;
        self.data.get(r * self.n_vocab..(r + 1) * self.n_vocab)
    }

    /// Batch indices of the rows, ascending.
    pub fn indices(&self) -> &[usize] {
        &self.rows
    }

    /// Every row, `n_vocab` values each, in batch order.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// Vocabulary size (the length of a row).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }
}
