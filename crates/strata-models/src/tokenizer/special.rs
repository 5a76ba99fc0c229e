//! Splitting special tokens out of the text before BPE (llama.cpp's `tokenizer_st_partition`).

use std::ops::Range;

/// A piece of the input after special-token partitioning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fragment {
    /// Raw text still to be tokenized (a byte range of the input).
    Text(Range<usize>),
    /// A special token found verbatim in the input.
    Token(u32),
}

/// Splits `text` around every occurrence of the given special tokens.
///
/// `specials` must already be in llama.cpp's order: longest text first. Like llama.cpp, each
/// special token in turn is searched (left to right, non-overlapping) in every text fragment
/// left by the previous ones, so a longer token always wins over a shorter one it contains
/// or overlaps, whatever their positions.
pub(crate) fn partition(text: &str, specials: &[(u32, &str)]) -> Vec<Fragment> {
    let mut frags = if text.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(0..text.len())]
    };
    for &(id, tok) in specials {
        if tok.is_empty() {
            continue;
        }
        let mut next = Vec::with_capacity(frags.len() + 2);
        for frag in frags {
            let Fragment::Text(range) = frag else {
                next.push(frag);
                continue;
            };
            let mut pos = range.start;
            while let Some(found) = text[pos..range.end].find(tok) {
                let m = pos + found;
                if m > pos {
                    next.push(Fragment::Text(pos..m));
                }
                next.push(Fragment::Token(id));
                pos = m + tok.len();
            }
            if pos < range.end {
                next.push(Fragment::Text(pos..range.end));
            }
        }
        frags = next;
    }
    frags
}

#[cfg(test)]
mod tests {
    use super::*;
    use Fragment::*;

    #[test]
    fn splits_all_occurrences() {
        let f = partition("a<s>b<s>", &[(7, "<s>")]);
        assert_eq!(f, [Text(0..1), Token(7), Text(4..5), Token(7)]);
    }

    #[test]
    fn longest_first_wins_over_prefix() {
        // "<|im_end|>" must not be split as "<|im" + ...; order is by length, not position.
        let f = partition("x<|a|b|>", &[(2, "<|a|b|>"), (1, "<|a|")]);
        assert_eq!(f, [Text(0..1), Token(2)]);
        let f = partition("<|a|><|a|b|>", &[(2, "<|a|b|>"), (1, "<|a|")]);
        assert_eq!(f, [Token(1), Text(4..5), Token(2)]);
    }

    #[test]
    fn empty_and_adjacent() {
        assert!(partition("", &[(1, "<s>")]).is_empty());
        assert_eq!(partition("<s><s>", &[(1, "<s>")]), [Token(1), Token(1)]);
        assert_eq!(partition("plain", &[(1, "")]), [Text(0..5)]);
    }
}
