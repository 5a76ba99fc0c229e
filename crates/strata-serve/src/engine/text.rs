//! Streaming text out of token pieces: pieces may cut a UTF-8 character
//! (held until complete), and text that may be the start of a stop string
//! is held until it is known not to be one, so a client never sees any
//! part of a stop string. The text stops where a stop string is first
//! complete (the longest of those ending there), as llama-server checks
//! them token by token.

/// What [`TextStream::push`] gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pushed {
    /// Text to send now.
    pub text: String,
    /// A stop string was found: `text` ends before it and the request stops.
    pub stopped: bool,
}

/// Incremental detokenizer with stop strings (module docs).
#[derive(Clone, Debug, Default)]
pub struct TextStream {
    bytes: Vec<u8>,
    held: String,
    stops: Vec<String>,
}

impl TextStream {
    /// A stream that stops at any of `stops` (empty strings are ignored).
    pub fn new(stops: Vec<String>) -> TextStream {
        TextStream {
            bytes: Vec::new(),
            held: String::new(),
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
        }
    }

    /// Adds a token's bytes.
    pub fn push(&mut self, piece: &[u8]) -> Pushed {
        self.bytes.extend_from_slice(piece);
        let complete = take_utf8(&mut self.bytes, false);
        // character by character: the request stops where the first stop
        // string is complete (of several ending there, the longest), however
        // the text was cut into pieces
        for ch in complete.chars() {
            self.held.push(ch);
            let at = self
                .stops
                .iter()
                .filter(|s| self.held.ends_with(s.as_str()))
                .map(|s| self.held.len() - s.len())
                .min();
            if let Some(at) = at {
                let text = self.held[..at].to_string();
                self.held.clear();
                self.bytes.clear();
                return Pushed {
                    text,
                    stopped: true,
                };
            }
        }
        // hold back the longest tail that begins some stop string
        let keep = self
            .stops
            .iter()
            .map(|s| partial_suffix(&self.held, s))
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let rest = self.held.split_off(cut);
        let text = std::mem::replace(&mut self.held, rest);
        Pushed {
            text,
            stopped: false,
        }
    }

    /// The text still held (the request ended without a stop string). A
    /// character cut by the end (the last token was its first bytes) is
    /// dropped, as llama-server does, rather than sent as U+FFFD.
    pub fn finish(&mut self) -> String {
        let tail = take_utf8(&mut self.bytes, false);
        self.bytes.clear();
        self.held.push_str(&tail);
        std::mem::take(&mut self.held)
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of
/// `stop` (ending on a character boundary of both).
fn partial_suffix(text: &str, stop: &str) -> usize {
    let mut best = 0;
    for (k, _) in stop.char_indices().skip(1) {
        if k > text.len() {
            break;
        }
        if text.is_char_boundary(text.len() - k) && text.ends_with(&stop[..k]) {
            best = k;
        }
    }
    best
}

/// The complete UTF-8 text at the front of `bytes` (removed from it). An
/// incomplete character at the end stays unless `flush`; invalid bytes
/// become U+FFFD.
pub fn take_utf8(bytes: &mut Vec<u8>, flush: bool) -> String {
    let mut out = String::new();
    let mut rest: &[u8] = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                rest = &[];
                break;
            }
            Err(e) => {
                let (ok, after) = rest.split_at(e.valid_up_to());
                // valid_up_to is a boundary: this cannot fail
                out.push_str(std::str::from_utf8(ok).unwrap_or_default());
                match e.error_len() {
                    Some(n) => {
                        out.push('\u{fffd}');
                        rest = &after[n..];
                    }
                    None if flush => {
                        out.push('\u{fffd}');
                        rest = &[];
                        break;
                    }
                    None => {
                        rest = after;
                        break;
                    }
                }
            }
        }
    }
    let keep = rest.to_vec();
    *bytes = keep;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn utf8_is_held_until_complete() {
        let mut t = TextStream::new(vec![]);
        let euro = "€".as_bytes();
        assert_eq!(t.push(&euro[..1]).text, "");
        assert_eq!(t.push(&euro[1..]).text, "€");
        assert_eq!(t.push(&[0xff, b'x']).text, "\u{fffd}x");
        t.push(&euro[..2]);
        assert_eq!(t.finish(), "");
    }

    #[test]
    fn stop_strings_are_never_sent() {
        let mut t = TextStream::new(vec!["</s>".into(), "\n\n".into()]);
        assert_eq!(t.push(b"Hello <").text, "Hello ");
        assert_eq!(t.push(b"/").text, "");
        let p = t.push(b"s> more");
        assert_eq!(
            p,
            Pushed {
                text: String::new(),
                stopped: true
            }
        );
        let mut t = TextStream::new(vec!["</s>".into()]);
        assert_eq!(t.push(b"a </").text, "a ");
        // not a stop string after all: released
        assert_eq!(t.push(b"b>").text, "</b>");
        let mut t = TextStream::new(vec!["\n\n".into()]);
        assert_eq!(t.push(b"x\n").text, "x");
        assert_eq!(t.finish(), "\n");
    }

    proptest! {
        /// Whatever the cut into pieces, the text sent is the text before
        /// the first stop string (or all of it), as one pass over the
        /// joined bytes finds.
        #[test]
        fn pieces_do_not_matter(
            words in proptest::collection::vec("[ab€\n]{0,3}", 0..12),
            stops in proptest::collection::vec("[ab€\n]{1,3}", 0..3),
            cuts in proptest::collection::vec(0usize..4, 0..40),
        ) {
            let whole: String = words.concat();
            let bytes = whole.as_bytes();
            // the first end of any stop string (the longest of those ending there)
            let want = whole.char_indices().map(|(i, c)| i + c.len_utf8()).find_map(|end| {
                stops.iter().filter(|s| whole[..end].ends_with(s.as_str()))
                    .map(|s| end - s.len()).min()
            });
            let mut t = TextStream::new(stops.clone());
            let (mut got, mut stopped, mut i) = (String::new(), false, 0);
            for c in cuts.iter().chain(std::iter::repeat(&1)) {
                if i >= bytes.len() { break; }
                let j = (i + c).min(bytes.len());
                let p = t.push(&bytes[i..j]);
                got.push_str(&p.text);
                i = j;
                if p.stopped { stopped = true; break; }
            }
            if !stopped { got.push_str(&t.finish()); }
            match want {
                Some(at) => { prop_assert!(stopped); prop_assert_eq!(&got, &whole[..at]); }
                None => { prop_assert!(!stopped); prop_assert_eq!(&got, &whole); }
            }
        }
    }
}
