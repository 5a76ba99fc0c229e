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

/// A special token to split out, and whether the whitespace around it goes
/// with it (llama.cpp's `LLAMA_TOKEN_ATTR_LSTRIP` / `RSTRIP`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Special<'a> {
    /// The token id.
    pub id: u32,
    /// Its text.
    pub text: &'a str,
    /// Drop the whitespace just before it.
    pub lstrip: bool,
    /// Drop the whitespace just after it.
    pub rstrip: bool,
}

/// C's `isspace` in the "C" locale, which llama.cpp's stripping uses.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Splits `text` around every occurrence of the given special tokens.
///
/// `specials` must already be in llama.cpp's order: longest text first. Like llama.cpp, each
/// special token in turn is searched (left to right, non-overlapping) in every text fragment
/// left by the previous ones, so a longer token always wins over a shorter one it contains
/// or overlaps, whatever their positions. A token that strips drops the ASCII whitespace
/// beside it from the neighbouring text fragment.
pub(crate) fn partition(text: &str, specials: &[Special<'_>]) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    let mut frags = if text.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(0..text.len())]
    };
    for sp in specials {
        let (id, tok) = (sp.id, sp.text);
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
                let mut left_end = m;
                if sp.lstrip {
                    while left_end > pos && c_space(bytes[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > pos {
                    next.push(Fragment::Text(pos..left_end));
                }
                next.push(Fragment::Token(id));
                pos = m + tok.len();
                if sp.rstrip {
                    while pos < range.end && c_space(bytes[pos]) {
                        pos += 1;
                    }
                }
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

    /// `partition` over plain (non-stripping) specials.
    fn partition(text: &str, specials: &[(u32, &str)]) -> Vec<Fragment> {
        let sp: Vec<Special<'_>> = specials
            .iter()
            .map(|&(id, text)| Special {
                id,
                text,
                lstrip: false,
                rstrip: false,
            })
            .collect();
        super::partition(text, &sp)
    }

    #[test]
    fn stripping_tokens_take_the_whitespace_beside_them() {
        let sp = |id, text, lstrip, rstrip| Special {
            id,
            text,
            lstrip,
            rstrip,
        };
        let text = "a \n<|u|>\n\t b<|e|> \nc";
        let f = super::partition(
            text,
            &[sp(1, "<|u|>", false, true), sp(2, "<|e|>", true, false)],
        );
        assert_eq!(
            f,
            [Text(0..3), Token(1), Text(11..12), Token(2), Text(17..20)]
        );
        // stripping to the end leaves no empty fragment
        let f = super::partition("<|u|> \n", &[sp(1, "<|u|>", false, true)]);
        assert_eq!(f, [Token(1)]);
        // non-ASCII spaces stay (C isspace)
        let f = super::partition("<|u|>\u{a0}x", &[sp(1, "<|u|>", false, true)]);
        assert_eq!(f, [Token(1), Text(5..8)]);
    }

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
