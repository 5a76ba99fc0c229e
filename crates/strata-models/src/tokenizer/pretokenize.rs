//! Pre-tokenization: splitting text into words before BPE merges, as llama.cpp's
//! `unicode_regex_split` does, plus the GPT-2 byte ↔ unicode map.
//!
//! llama.cpp applies a *list* of regexes in sequence: each one re-splits every piece the
//! previous one produced, and keeps both the matches and the unmatched gaps between them.
//! The GPT-2 and LLaMA-3 regexes are not run through a regex engine there but through
//! hand-written splitters (`unicode_regex_split_custom_gpt2/llama3`) whose look-ahead
//! (`\s+(?!\S)`) cannot see past the end of the current piece. Those splitters are ported
//! here verbatim so that the piece boundaries are identical; other regexes go through the
//! `regex` crate.

use regex::Regex;
use unicode_general_category::{get_general_category, GeneralCategory as Gc};

use super::{Result, TokenizerError};

/// `\p{L}` as llama.cpp's unicode tables define it (general category L*).
pub(crate) fn is_letter(c: char) -> bool {
    matches!(
        get_general_category(c),
        Gc::UppercaseLetter
            | Gc::LowercaseLetter
            | Gc::TitlecaseLetter
            | Gc::ModifierLetter
            | Gc::OtherLetter
    )
}

/// `\p{N}` (general category N*: Nd, Nl, No).
pub(crate) fn is_number(c: char) -> bool {
    matches!(
        get_general_category(c),
        Gc::DecimalNumber | Gc::LetterNumber | Gc::OtherNumber
    )
}

/// `\s` as llama.cpp defines it: the Unicode `White_Space` set, which is what
/// `char::is_whitespace` implements.
pub(crate) fn is_whitespace(c: char) -> bool {
    c.is_whitespace()
}

/// Character classes of one code point; `None` (out of the current piece) has none.
#[derive(Clone, Copy, Default)]
struct Flags {
    letter: bool,
    number: bool,
    whitespace: bool,
    /// llama.cpp's `flags.as_uint() != 0`: true for every code point in range.
    any: bool,
}

fn flags(c: Option<char>) -> Flags {
    match c {
        None => Flags::default(),
        Some(c) => Flags {
            letter: is_letter(c),
            number: is_number(c),
            whitespace: is_whitespace(c),
            any: true,
        },
    }
}

/// One step of a pre-tokenizer.
#[derive(Debug, Clone)]
pub(crate) enum SplitRule {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (custom splitter).
    Gpt2,
    /// The LLaMA-3 regex (custom splitter); `max_digits` is 3 for `\p{N}{1,3}`, 1 for `\p{N}`.
    Llama3 {
        /// Longest run of digits kept together.
        max_digits: usize,
    },
    /// `\p{N}`: every number code point on its own.
    EachNumber,
    /// Any other regex, matched with the `regex` crate (leftmost-first, like ECMAScript).
    Regex(Regex),
}

/// The pre-tokenizer of a BPE vocabulary (`tokenizer.ggml.pre`).
#[derive(Debug, Clone)]
pub struct PreTokenizer {
    name: String,
    rules: Vec<SplitRule>,
}

fn re(pattern: &str) -> Result<SplitRule> {
    Regex::new(pattern)
        .map(SplitRule::Regex)
        .map_err(|e| TokenizerError::Regex(e.to_string()))
}

/// What a `tokenizer.ggml.pre` name implies besides the split rules (llama.cpp's `load`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PreDefaults {
    /// `clean_spaces` used by detokenization.
    pub clean_spaces: bool,
    /// Merges skipped when the whole word is a token (LLaMA-3 style).
    pub ignore_merges: bool,
    /// Default for `add_bos` when the model does not say.
    pub add_bos: bool,
}

impl PreTokenizer {
    /// Builds the pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre = name`. Unknown or
    /// empty names fall back to llama.cpp's "default" rules, as llama.cpp does (with a warning).
    pub(crate) fn for_name(name: &str) -> Result<(Self, PreDefaults)> {
        let mut d = PreDefaults {
            clean_spaces: true,
            ignore_merges: false,
            add_bos: false,
        };
        let gpt2_only = || vec![SplitRule::Gpt2];
        let rules = match name {
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => {
                d.ignore_merges = true;
                d.add_bos = true;
                vec![SplitRule::Llama3 { max_digits: 3 }]
            }
            "dbrx" | "smaug-bpe" => vec![SplitRule::Llama3 { max_digits: 3 }],
            "glm4" | "chatglm-bpe" => vec![SplitRule::Llama3 { max_digits: 3 }],
            "qwen2" | "deepseek-r1-qwen" | "kormo" => {
                d.clean_spaces = false;
                vec![SplitRule::Llama3 { max_digits: 1 }]
            }
            "megrez" | "stablelm2" | "hunyuan" => vec![SplitRule::Llama3 { max_digits: 1 }],
            "smollm" | "command-r" => {
                d.clean_spaces = false;
                vec![SplitRule::EachNumber, SplitRule::Gpt2]
            }
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" => {
                vec![SplitRule::EachNumber, SplitRule::Gpt2]
            }
            "gpt2" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "jina-v1-en" | "jina-v2-code"
            | "roberta-bpe" | "mpt" | "olmo" | "jais" | "exaone4" => gpt2_only(),
            "trillion" | "granite-docling" => {
                d.clean_spaces = false;
                gpt2_only()
            }
            "falcon" => vec![
                re(r"[\p{P}\$\+<=>\^~\|`]+")?,
                SplitRule::Gpt2,
                re(r"[0-9][0-9][0-9]")?,
            ],
            "deepseek-coder" => {
                d.clean_spaces = false;
                vec![
                    re(r"[\r\n]")?,
                    re(r"\s?\p{L}+")?,
                    re(r"\s?\p{P}+")?,
                    re(r"[一-龥ࠀ-一가-퟿]+")?,
                    SplitRule::EachNumber,
                ]
            }
            // "default", "" and every name llama.cpp does not know.
            _ => vec![
                re(r"[\p{P}\$\+<=>\^~\|]+")?,
                SplitRule::Gpt2,
                re(r"\p{N}+")?,
                re(r"[0-9][0-9][0-9]")?,
            ],
        };
        Ok((
            Self {
                name: name.to_string(),
                rules,
            },
            d,
        ))
    }

    /// The `tokenizer.ggml.pre` name this was built from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Splits `text` into words (as UTF-8 string slices of `text`), like llama.cpp's
    /// `unicode_regex_split` before byte encoding.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let cpts: Vec<char> = text.chars().collect();
        let mut offsets = vec![cpts.len()];
        for rule in &self.rules {
            offsets = match rule {
                SplitRule::Gpt2 => split_gpt2(&cpts, &offsets),
                SplitRule::Llama3 { max_digits } => split_llama3(&cpts, &offsets, *max_digits),
                SplitRule::EachNumber => split_each_number(&cpts, &offsets),
                SplitRule::Regex(r) => split_regex(&cpts, &offsets, r),
            };
        }
        // code point lengths -> byte slices
        let mut byte_pos: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        byte_pos.push(text.len());
        let mut words = Vec::with_capacity(offsets.len());
        let mut start = 0usize;
        for len in offsets {
            words.push(&text[byte_pos[start]..byte_pos[start + len]]);
            start += len;
        }
        words
    }
}

/// One offset span of the text being split by a custom splitter, with the
/// bounds-checked lookups both llama.cpp ports use.
struct Chunk<'a> {
    cpts: &'a [char],
    ini: usize,
    end: usize,
}

impl Chunk<'_> {
    fn get(&self, pos: usize) -> Option<char> {
        (self.ini <= pos && pos < self.end).then(|| self.cpts[pos])
    }

    fn flags(&self, pos: usize) -> Flags {
        flags(self.get(pos))
    }

    /// First position from `pos` on whose flags fail `keep`.
    fn skip_while(&self, mut pos: usize, keep: impl Fn(Flags) -> bool) -> usize {
        while keep(self.flags(pos)) {
            pos += 1;
        }
        pos
    }

    /// End of `'s|'t|'re|'ve|'m|'ll|'d` at `pos` (case-insensitive when
    /// `fold_case`), if one starts there.
    fn contraction(&self, pos: usize, fold_case: bool) -> Option<usize> {
        let case = |c: Option<char>| match c {
            Some(c) if fold_case => Some(c.to_lowercase().next().unwrap_or(c)),
            c => c,
        };
        if self.cpts[pos] != '\'' || pos + 1 >= self.end {
            return None;
        }
        let n = case(self.get(pos + 1));
        if matches!(n, Some('s' | 't' | 'm' | 'd')) {
            return Some(pos + 2);
        }
        if pos + 2 < self.end {
            let nn = case(self.get(pos + 2));
            if matches!(
                (n, nn),
                (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
            ) {
                return Some(pos + 3);
            }
        }
        None
    }

    /// The whitespace alternatives that close both patterns (`\s*[\r\n]+` only
    /// when `newlines`, then `\s+(?!\S)`, `\s+`), or one code point if none match.
    fn whitespace_end(&self, pos: usize, newlines: bool) -> usize {
        let mut nws = 0;
        let mut last_end_rn = 0;
        while self.flags(pos + nws).whitespace {
            if newlines && matches!(self.get(pos + nws), Some('\r' | '\n')) {
                last_end_rn = pos + nws + 1;
            }
            nws += 1;
        }
        if last_end_rn > 0 {
            last_end_rn
        } else if nws > 1 && self.get(pos + nws).is_some() {
            pos + nws - 1
        } else if nws > 0 {
            pos + nws
        } else {
            pos + 1
        }
    }
}

/// Drives a custom splitter over every offset span: `step` returns where the
/// piece starting at `pos` ends, and may cut pieces before that through its
/// `cut` argument (the end of each earlier piece).
fn split_custom(
    cpts: &[char],
    offsets: &[usize],
    mut step: impl FnMut(&Chunk<'_>, usize, &mut dyn FnMut(usize)) -> usize,
) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &offset in offsets {
        let chunk = Chunk {
            cpts,
            ini: start,
            end: start + offset,
        };
        start = chunk.end;
        let mut prev_end = chunk.ini;
        let mut add = |e: usize| {
            if e > prev_end {
                out.push(e - prev_end);
            }
            prev_end = e;
        };
        let mut pos = chunk.ini;
        while pos < chunk.end {
            pos = step(&chunk, pos, &mut add);
            add(pos);
        }
    }
    out
}

/// `[^\s\p{L}\p{N}]` for a code point in range.
fn is_other(f: Flags) -> bool {
    !(f.whitespace || f.letter || f.number) && f.any
}

/// Port of llama.cpp's `unicode_regex_split_custom_gpt2`.
fn split_gpt2(cpts: &[char], offsets: &[usize]) -> Vec<usize> {
    split_custom(cpts, offsets, |c, pos, _| {
        // 's|'t|'re|'ve|'m|'ll|'d
        if let Some(e) = c.contraction(pos, false) {
            return e;
        }
        let cpt = c.cpts[pos];
        let f2 = if cpt == ' ' {
            c.flags(pos + 1)
        } else {
            c.flags(pos)
        };
        let sp = usize::from(cpt == ' ');
        // <space>?\p{L}+
        if f2.letter {
            return c.skip_while(pos + sp, |f| f.letter);
        }
        // <space>?\p{N}+
        if f2.number {
            return c.skip_while(pos + sp, |f| f.number);
        }
        // <space>?[^\s\p{L}\p{N}]+
        if is_other(f2) {
            return c.skip_while(pos + sp, is_other);
        }
        // \s+(?!\S), \s+, or no match
        c.whitespace_end(pos, false)
    })
}

/// Port of llama.cpp's `unicode_regex_split_custom_llama3` (with the digit run length as a
/// parameter so that the Qwen2 variant `\p{N}` can share it).
fn split_llama3(cpts: &[char], offsets: &[usize], max_digits: usize) -> Vec<usize> {
    split_custom(cpts, offsets, |c, mut pos, cut| {
        // (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if let Some(e) = c.contraction(pos, true) {
            return e;
        }
        let cpt = c.cpts[pos];
        let f = c.flags(pos);
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(cpt == '\r' || cpt == '\n' || f.number) && (f.letter || c.flags(pos + 1).letter) {
            return c.skip_while(pos + 1, |f| f.letter);
        }
        // \p{N}{1,max_digits}
        if f.number {
            let mut run_start = pos;
            while c.flags(pos).number {
                pos += 1;
                if pos - run_start >= max_digits {
                    cut(pos);
                    run_start = pos;
                }
            }
            return pos;
        }
        // <space>?[^\s\p{L}\p{N}]+[\r\n]*
        let f2 = if cpt == ' ' { c.flags(pos + 1) } else { f };
        if !(f2.whitespace || f2.letter || f2.number) && f.any {
            pos = c.skip_while(pos + usize::from(cpt == ' '), is_other);
            while matches!(c.get(pos), Some('\r' | '\n')) {
                pos += 1;
            }
            return pos;
        }
        // \s*[\r\n]+, \s+(?!\S), \s+, or no match
        c.whitespace_end(pos, true)
    })
}

/// `\p{N}` through llama.cpp's generic path: matches and gaps are both kept.
fn split_each_number(cpts: &[char], offsets: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &offset in offsets {
        let mut gap = 0;
        for &c in &cpts[start..start + offset] {
            if is_number(c) {
                if gap > 0 {
                    out.push(gap);
                    gap = 0;
                }
                out.push(1);
            } else {
                gap += 1;
            }
        }
        if gap > 0 {
            out.push(gap);
        }
        start += offset;
    }
    out
}

/// A regex applied to every piece, keeping matches and the gaps between them
/// (llama.cpp's `unicode_regex_split_stl`).
fn split_regex(cpts: &[char], offsets: &[usize], re: &Regex) -> Vec<usize> {
    let mut out = Vec::with_capacity(offsets.len());
    let mut start = 0;
    for &offset in offsets {
        let piece: String = cpts[start..start + offset].iter().collect();
        let nchars = |s: &str| s.chars().count();
        let mut last = 0usize; // byte offset in piece
        for m in re.find_iter(&piece) {
            if m.start() == m.end() {
                continue;
            }
            if m.start() > last {
                out.push(nchars(&piece[last..m.start()]));
            }
            out.push(nchars(m.as_str()));
            last = m.end();
        }
        if last < piece.len() {
            out.push(nchars(&piece[last..]));
        }
        start += offset;
    }
    out
}

/// The GPT-2 byte → unicode table: printable Latin-1 bytes map to themselves, the other 68
/// bytes to U+0100.. in byte order.
pub(crate) fn byte_to_unicode_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        table[b as usize] = char::from_u32(c).expect("valid code point");
    }
    table
}

/// Byte-encodes a word: every UTF-8 byte becomes its GPT-2 unicode stand-in.
pub(crate) fn byte_encode(word: &str, table: &[char; 256]) -> String {
    word.bytes().map(|b| table[b as usize]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(pre: &str, text: &str) -> Vec<String> {
        let (p, _) = PreTokenizer::for_name(pre).unwrap();
        p.split(text).into_iter().map(String::from).collect()
    }

    #[test]
    fn smollm_splits_every_digit() {
        assert_eq!(
            split("smollm", "year 2024 had"),
            ["year", " ", "2", "0", "2", "4", " had"]
        );
        assert_eq!(split("smollm", "3.14"), ["3", ".", "1", "4"]);
        // Non-ASCII numbers are \p{N} too.
        assert_eq!(split("smollm", "x²½"), ["x", "²", "½"]);
    }

    #[test]
    fn gpt2_whitespace_lookahead_stays_inside_piece() {
        assert_eq!(
            split("gpt2", "multiple   spaces  "),
            ["multiple", "  ", " spaces", "  "]
        );
        assert_eq!(split("gpt2", "a\n\nb"), ["a", "\n", "\n", "b"]);
        assert_eq!(split("gpt2", "   "), ["   "]);
        assert_eq!(split("gpt2", "\t\tx"), ["\t", "\t", "x"]);
    }

    #[test]
    fn gpt2_contractions_are_case_sensitive() {
        assert_eq!(
            split("gpt2", "don't DON'T"),
            ["don", "'t", " DON", "'", "T"]
        );
        assert_eq!(split("gpt2", "we'll"), ["we", "'ll"]);
    }

    #[test]
    fn gpt2_punctuation_and_marks() {
        // U+FE0F (a mark) is neither letter nor number: it sticks to the symbol run.
        assert_eq!(split("gpt2", "a ❤️!"), ["a", " ❤️!"]);
        assert_eq!(split("gpt2", "x = !="), ["x", " =", " !="]);
    }

    #[test]
    fn llama3_groups_digits_by_three_and_newlines() {
        assert_eq!(split("llama-bpe", "1234567"), ["123", "456", "7"]);
        assert_eq!(split("llama-bpe", "a  \n\nb"), ["a", "  \n\n", "b"]);
        assert_eq!(split("llama-bpe", "I'M ok"), ["I", "'M", " ok"]);
        assert_eq!(split("qwen2", "123"), ["1", "2", "3"]);
    }

    #[test]
    fn byte_table_is_gpt2() {
        let t = byte_to_unicode_table();
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(t[b'\t' as usize], 'ĉ');
        assert_eq!(t[b'a' as usize], 'a');
        assert_eq!(t[0xAD], 'Ń');
        let mut seen = std::collections::HashSet::new();
        assert!(t.iter().all(|c| seen.insert(*c)));
    }
}
