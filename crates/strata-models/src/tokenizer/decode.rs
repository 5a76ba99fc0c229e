//! Detokenization: token ids back to bytes and text (llama.cpp's `token_to_piece` and
//! `llama_detokenize`, with its `clean_spaces` passes).

use super::{Result, TokenType, Tokenizer};

impl Tokenizer {
    /// llama.cpp's `token_to_piece` with `special = true`, no lstrip: the bytes a token
    /// stands for (control tokens give their text). Pieces may be partial UTF-8.
    pub fn token_to_piece(&self, id: u32) -> Result<&[u8]> {
        self.check(id)?;
        Ok(&self.pieces[id as usize])
    }

    /// llama.cpp's `token_to_piece` with all options: `special = false` renders control and
    /// unknown tokens as nothing; `lstrip` drops up to that many leading spaces.
    pub fn token_to_piece_with(&self, id: u32, lstrip: usize, special: bool) -> Result<&[u8]> {
        self.check(id)?;
        if !special
            && matches!(
                self.types[id as usize],
                TokenType::Control | TokenType::Unknown
            )
        {
            return Ok(&[]);
        }
        let p = &self.pieces[id as usize][..];
        let skip = p.iter().take(lstrip).take_while(|&&b| b == b' ').count();
        Ok(&p[skip..])
    }

    /// llama.cpp's `llama_detokenize`: concatenated pieces as raw bytes.
    ///
    /// `remove_special` drops a leading BOS / trailing EOS when the model adds them;
    /// `unparse_special` renders control tokens (otherwise they give nothing).
    pub fn decode_bytes(
        &self,
        ids: &[u32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>> {
        let mut ids = ids;
        // SPM: the space added in front of the text is dropped again, unless a BOS is removed
        let mut remove_space = self.add_space_prefix;
        if remove_special && self.add_bos && self.bos.is_some() && ids.first() == self.bos.as_ref()
        {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && self.add_eos && self.eos.is_some() && ids.last() == self.eos.as_ref() {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            let lstrip = usize::from(remove_space);
            out.extend_from_slice(self.token_to_piece_with(id, lstrip, unparse_special)?);
            remove_space = false;
        }
        if self.clean_spaces {
            clean_spaces(&mut out);
        }
        Ok(out)
    }

    /// [`Tokenizer::decode_bytes`] as a `String` (invalid UTF-8, e.g. a cut multi-byte
    /// character, becomes U+FFFD).
    pub fn decode(
        &self,
        ids: &[u32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<String> {
        let bytes = self.decode_bytes(ids, remove_special, unparse_special)?;
        Ok(String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }
}

/// llama.cpp's `clean_spaces` passes in `llama_detokenize` (BPE vocabularies whose
/// pre-tokenizer keeps them, e.g. GPT-2; not SmolLM): drop the space before `?!.,`, around a
/// lone `'`, and before `'s 'm 're 've`.
pub(super) fn clean_spaces(text: &mut Vec<u8>) {
    // pass 1: " ?", " !", " .", " ,"
    let t = std::mem::take(text);
    let mut out: Vec<u8> = Vec::with_capacity(t.len());
    for (i, &x) in t.iter().enumerate() {
        if i > 0 && t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(x);
    }
    // pass 2: " ' " -> "'"
    // (llama.cpp overwrites the dropped space with NUL in place, so it no longer counts as
    // the space before a following apostrophe: mimicked on a mutable copy)
    let mut t = std::mem::take(&mut out);
    let mut i = 0;
    while i < t.len() {
        let x = t[i];
        if i > 0 && x == b'\'' && i + 1 < t.len() && t[i - 1] == b' ' && t[i + 1] == b' ' {
            out.pop();
            out.push(x);
            t[i + 1] = 0;
            i += 2;
            continue;
        }
        out.push(x);
        i += 1;
    }
    // pass 3: " 's", " 'm", " 're", " 've"
    let t = std::mem::take(&mut out);
    for (i, &x) in t.iter().enumerate() {
        if i > 0 && t[i - 1] == b' ' && x == b'\'' && i + 1 < t.len() {
            let x1 = t[i + 1];
            let x2 = t.get(i + 2).copied();
            if matches!(x1, b's' | b'm')
                || (i + 2 < t.len() && matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e'))))
            {
                out.pop();
            }
        }
        out.push(x);
    }
    *text = out;
}
