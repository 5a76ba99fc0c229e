//! Byte-level BPE merging (llama.cpp's `llm_tokenizer_bpe_session`).

use super::symbol::{char_symbols, merge_pair, pieces, Symbol};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Merge ranks from `tokenizer.ggml.merges`: the line index is the rank, lower merges first.
#[derive(Debug, Clone, Default)]
pub(crate) struct MergeRanks {
    /// left -> right -> rank; nested so that lookups by `&str` need no allocation.
    ranks: HashMap<String, HashMap<String, u32>>,
    len: usize,
}

impl MergeRanks {
    /// Parses merge lines `"left right"`. Like llama.cpp, the split is at the first space
    /// *after* the first byte, a line without one becomes the pair ("", ""), and a repeated
    /// pair keeps its first (lowest) rank.
    pub(crate) fn from_lines(lines: &[String]) -> Self {
        let mut ranks: HashMap<String, HashMap<String, u32>> = HashMap::new();
        let mut len = 0;
        for (i, line) in lines.iter().enumerate() {
            // byte search: a space byte is always a char boundary, byte 1 need not be
            let space = line.as_bytes().iter().skip(1).position(|&b| b == b' ');
            let (l, r) = match space {
                Some(p) => (&line[..p + 1], &line[p + 2..]),
                None => ("", ""),
            };
            let inner = ranks.entry(l.to_string()).or_default();
            if !inner.contains_key(r) {
                inner.insert(r.to_string(), i as u32);
                len += 1;
            }
        }
        Self { ranks, len }
    }

    fn rank(&self, left: &str, right: &str) -> Option<u32> {
        self.ranks.get(left)?.get(right).copied()
    }

    /// Number of distinct merge pairs.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Applies the merges to one byte-encoded word and returns its final symbols (substrings of
/// `word`), in order. Bigrams are taken lowest rank first, leftmost first among equal ranks;
/// a bigram whose two symbols changed since it was queued is skipped, exactly like llama.cpp.
pub(crate) fn merge_word<'a>(word: &'a str, ranks: &MergeRanks) -> Vec<&'a str> {
    let mut symbols = char_symbols(word);
    // (rank, left index) ordered ascending; plus the merged text to detect stale entries.
    let mut queue: BinaryHeap<Reverse<(u32, usize, usize, String)>> = BinaryHeap::new();
    let text = |s: &Symbol| &word[s.start..s.start + s.len];
    let push =
        |queue: &mut BinaryHeap<_>, symbols: &[Symbol], l: Option<usize>, r: Option<usize>| {
            let (Some(l), Some(r)) = (l, r) else { return };
            let (ls, rs) = (text(&symbols[l]), text(&symbols[r]));
            if let Some(rank) = ranks.rank(ls, rs) {
                queue.push(Reverse((rank, l, r, format!("{ls}{rs}"))));
            }
        };
    for i in 1..symbols.len() {
        push(&mut queue, &symbols, Some(i - 1), Some(i));
    }
    while let Some(Reverse((_, l, r, merged))) = queue.pop() {
        let (ls, rs) = (symbols[l], symbols[r]);
        if ls.len == 0 || rs.len == 0 {
            continue;
        }
        // stale: one side grew since this bigram was queued
        if ls.start + ls.len != rs.start || word[ls.start..rs.start + rs.len] != merged {
            continue;
        }
        let (prev, next) = merge_pair(&mut symbols, l, r);
        push(&mut queue, &symbols, prev, Some(l));
        push(&mut queue, &symbols, Some(l), next);
    }
    pieces(&symbols, word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranks(lines: &[&str]) -> MergeRanks {
        MergeRanks::from_lines(&lines.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn merges_follow_rank_not_position() {
        // "b c" ranks before "a b": "abc" -> a + bc, not ab + c.
        let r = ranks(&["b c", "a b"]);
        assert_eq!(merge_word("abc", &r), ["a", "bc"]);
        let r = ranks(&["a b", "b c"]);
        assert_eq!(merge_word("abc", &r), ["ab", "c"]);
    }

    #[test]
    fn equal_rank_leftmost_first_and_chains() {
        let r = ranks(&["a a", "aa aa"]);
        assert_eq!(merge_word("aaaaa", &r), ["aaaa", "a"]);
        assert_eq!(merge_word("aaa", &r), ["aa", "a"]);
    }

    #[test]
    fn multibyte_symbols_and_odd_lines() {
        let r = ranks(&["Ġ h", "Ġh i", "nospace", "x  y"]);
        assert_eq!(merge_word("Ġhi", &r), ["Ġhi"]);
        // "x  y" splits at the first space after byte 0: ("x", " y").
        assert_eq!(merge_word("x y", &r), ["x", " ", "y"]);
        assert_eq!(r.len(), 4);
    }

    #[test]
    fn first_rank_wins_on_duplicates() {
        let r = ranks(&["a b", "c d", "a b"]);
        assert_eq!(r.rank("a", "b"), Some(0));
    }
}
