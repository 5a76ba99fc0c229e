//! SentencePiece-style tokenization (`tokenizer.ggml.model = "llama"`), as llama.cpp's
//! `llm_tokenizer_spm_session`: merges driven by token scores, not a merge list.

use super::symbol::{char_symbols, merge_pair, pieces, Symbol};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// `▁`, SentencePiece's visible space.
pub(crate) const SPACE: &str = "\u{2581}";

/// `llama_escape_whitespace`: every `' '` becomes `▁`.
pub(crate) fn escape_whitespace(text: &str) -> String {
    text.replace(' ', SPACE)
}

/// `llama_unescape_whitespace`: every `▁` becomes `' '`.
pub(crate) fn unescape_whitespace(text: &str) -> String {
    text.replace(SPACE, " ")
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Highest score first; among equal scores the leftmost (llama.cpp's comparator).
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// Merges the characters of an (already whitespace-escaped) text by token score and returns
/// the final pieces in order. A piece that is not a token is left for the caller to spell
/// out as byte tokens.
pub(crate) fn merge<'a>(
    text: &'a str,
    token_to_id: &HashMap<String, u32>,
    scores: &[f32],
) -> Vec<&'a str> {
    let mut symbols = char_symbols(text);
    let mut queue = BinaryHeap::new();
    let try_add =
        |queue: &mut BinaryHeap<Bigram>, symbols: &[Symbol], l: Option<usize>, r: Option<usize>| {
            let (Some(l), Some(r)) = (l, r) else { return };
            let (ls, rs) = (symbols[l], symbols[r]);
            let merged = &text[ls.start..rs.start + rs.len];
            if let Some(&id) = token_to_id.get(merged) {
                queue.push(Bigram {
                    score: scores.get(id as usize).copied().unwrap_or(0.0),
                    left: l,
                    right: r,
                    size: merged.len(),
                });
            }
        };
    for i in 1..symbols.len() {
        try_add(&mut queue, &symbols, Some(i - 1), Some(i));
    }
    while let Some(b) = queue.pop() {
        let (ls, rs) = (symbols[b.left], symbols[b.right]);
        if ls.len == 0 || rs.len == 0 || ls.len + rs.len != b.size {
            continue;
        }
        let (prev, next) = merge_pair(&mut symbols, b.left, b.right);
        try_add(&mut queue, &symbols, prev, Some(b.left));
        try_add(&mut queue, &symbols, Some(b.left), next);
    }
    pieces(&symbols, text)
}

/// `<0xAB>` → `0xAB` for SentencePiece byte tokens.
pub(crate) fn byte_of_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_score_merges_first() {
        let vocab: HashMap<String, u32> = [("ab", 0), ("bc", 1), ("abc", 2)]
            .map(|(s, i)| (s.to_string(), i))
            .into();
        // "bc" scores higher than "ab": a + bc, then abc.
        assert_eq!(merge("abc", &vocab, &[-2.0, -1.0, -3.0]), ["abc"]);
        let vocab: HashMap<String, u32> = [("ab", 0), ("bc", 1)]
            .map(|(s, i)| (s.to_string(), i))
            .into();
        assert_eq!(merge("abc", &vocab, &[-2.0, -1.0]), ["a", "bc"]);
        assert_eq!(merge("abc", &vocab, &[-1.0, -2.0]), ["ab", "c"]);
        // equal scores: leftmost first
        assert_eq!(merge("abc", &vocab, &[-1.0, -1.0]), ["ab", "c"]);
    }

    #[test]
    fn escapes_and_bytes() {
        assert_eq!(escape_whitespace(" a b"), "▁a▁b");
        assert_eq!(unescape_whitespace("▁a▁b"), " a b");
        assert_eq!(byte_of_token("<0x0A>"), Some(10));
        assert_eq!(byte_of_token("<0xff>"), Some(255));
        assert_eq!(byte_of_token("a"), None);
    }
}
