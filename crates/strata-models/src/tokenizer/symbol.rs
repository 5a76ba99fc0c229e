//! The doubly linked symbol list that both merge loops (BPE by rank, SentencePiece by
//! score) rewrite: one symbol per character at first, merged pairwise in place.

/// A run of the text, linked to its live neighbours; `len == 0` once merged away.
#[derive(Clone, Copy)]
pub(super) struct Symbol {
    pub(super) prev: Option<usize>,
    pub(super) next: Option<usize>,
    pub(super) start: usize,
    pub(super) len: usize,
}

/// One symbol per character of `text`, linked in order.
pub(super) fn char_symbols(text: &str) -> Vec<Symbol> {
    let mut symbols = Vec::with_capacity(text.len());
    let n = text.chars().count();
    for (i, (start, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            prev: i.checked_sub(1),
            next: (i + 1 < n).then_some(i + 1),
            start,
            len: c.len_utf8(),
        });
    }
    symbols
}

/// Merges symbol `r` into its left neighbour `l` and returns the merged symbol's
/// `(prev, next)` neighbours, the two new bigrams to consider.
pub(super) fn merge_pair(
    symbols: &mut [Symbol],
    l: usize,
    r: usize,
) -> (Option<usize>, Option<usize>) {
    let rs = symbols[r];
    symbols[l].len += rs.len;
    symbols[r].len = 0;
    symbols[l].next = rs.next;
    if let Some(nx) = rs.next {
        symbols[nx].prev = Some(l);
    }
    (symbols[l].prev, symbols[l].next)
}

/// The texts of the symbols still live, in order.
pub(super) fn pieces<'a>(symbols: &[Symbol], text: &'a str) -> Vec<&'a str> {
    symbols
        .iter()
        .filter(|s| s.len > 0)
        .map(|s| &text[s.start..s.start + s.len])
        .collect()
}
