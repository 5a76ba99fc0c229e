//! Always-on tests on a small hand-built byte-level vocabulary (no model file needed).

use super::*;

const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const NORMAL: i32 = 1;

const MERGES: &[&str] = &[
    "h e", "l l", "l d", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor ld", "Ġ Ġ", "Ċ Ċ", "1 2",
];

/// ids 0..4: specials; 4..260: the 256 byte tokens in byte order; then one token per merge.
fn parts(pre: &str) -> TokenizerParts {
    let table = pretokenize::byte_to_unicode_table();
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"]
        .map(String::from)
        .to_vec();
    let mut types = vec![CONTROL, CONTROL, CONTROL, USER_DEFINED];
    for c in table {
        tokens.push(c.to_string());
        types.push(NORMAL);
    }
    for m in MERGES {
        tokens.push(m.replace(' ', ""));
        types.push(NORMAL);
    }
    TokenizerParts {
        model: "gpt2".into(),
        pre: pre.into(),
        tokens,
        token_types: types,
        merges: MERGES.iter().map(|s| s.to_string()).collect(),
        bos_id: Some(1),
        eos_id: Some(2),
        ..Default::default()
    }
}

/// A model named like Phi-3 (llama.cpp lowercases `general.name` and looks
/// for `phi-3` / `phi3`): its special tokens, `<|endoftext|>` aside, take the
/// whitespace after them when parsed; others keep it.
#[test]
fn phi3_named_specials_strip_the_whitespace_after_them() {
    let mut p = parts("qwen2");
    p.model_name = "Phi3 mini".into();
    let phi = Tokenizer::from_parts(p).unwrap();
    let plain = tiny("qwen2");
    let nl = byte_id(b'\n');
    let text = "<|im_start|>\n \thello<|endoftext|>\n";
    let a = phi.encode(text, false, true).unwrap();
    let b = plain.encode(text, false, true).unwrap();
    assert_eq!(a.first(), Some(&1));
    assert_ne!(a[1], nl, "{a:?}");
    assert_eq!(a[a.len() - 2..], [0, nl], "<|endoftext|> keeps its newline");
    assert_eq!(b[1], nl, "{b:?}");
    assert!(b.len() > a.len());
    // not parsed as specials: nothing is stripped
    assert_eq!(
        phi.encode(text, false, false).unwrap(),
        plain.encode(text, false, false).unwrap()
    );
}

fn tiny(pre: &str) -> Tokenizer {
    Tokenizer::from_parts(parts(pre)).unwrap()
}

fn byte_id(b: u8) -> u32 {
    4 + b as u32
}

fn id(t: &Tokenizer, text: &str) -> u32 {
    t.token_id(text)
        .unwrap_or_else(|| panic!("no token {text:?}"))
}

fn roundtrip(t: &Tokenizer, s: &str) {
    let ids = t.encode(s, false, true).unwrap();
    assert_eq!(t.decode(&ids, false, true).unwrap(), s, "ids {ids:?}");
}

#[test]
fn merges_build_words() {
    let t = tiny("smollm");
    let ids = t.encode("hello world", false, false).unwrap();
    assert_eq!(ids, [id(&t, "hello"), id(&t, "Ġworld")]);
    // "hell" stops at the rank-4 merge: no "hello" without the "o".
    assert_eq!(t.encode("hell", false, false).unwrap(), [id(&t, "hell")]);
    // "held": "h e" then "l d"; "he ld" is not a merge.
    assert_eq!(
        t.encode("held", false, false).unwrap(),
        [id(&t, "he"), id(&t, "ld")]
    );
}

#[test]
fn unmerged_bytes_use_the_gpt2_byte_map() {
    let t = tiny("smollm");
    // é = C3 A9, 😀 = F0 9F 98 80: one byte token each, in byte order.
    let ids = t.encode("é😀", false, false).unwrap();
    let want: Vec<u32> = "é😀".bytes().map(byte_id).collect();
    assert_eq!(ids, want);
    assert_eq!(t.token_to_piece(byte_id(0x9F)).unwrap(), [0x9F]);
    assert_eq!(t.token_text(byte_id(b' ')).unwrap(), "Ġ");
    assert_eq!(t.token_text(byte_id(b'\n')).unwrap(), "Ċ");
    // Partial pieces are raw bytes; the joined decode is valid UTF-8 again.
    assert_eq!(t.decode(&ids, false, true).unwrap(), "é😀");
    // A cut character decodes lossily as a String but exactly as bytes.
    assert_eq!(t.decode(&ids[..2], false, true).unwrap(), "é");
    assert_eq!(t.decode(&ids[2..4], false, true).unwrap(), "\u{FFFD}");
    assert_eq!(
        t.decode_bytes(&ids[2..4], false, true).unwrap(),
        [0xF0, 0x9F]
    );
}

#[test]
fn cjk_and_emoji_round_trip() {
    let t = tiny("smollm");
    for s in [
        "你好，世界。",
        "日本語のテキスト",
        "한국어",
        "👍🏽 and ❤️",
        "Łódź Zürich",
        "αβγ ∑∫√",
    ] {
        roundtrip(&t, s);
    }
}

#[test]
fn special_tokens_only_with_parse_special() {
    let t = tiny("smollm");
    let text = "<|im_start|>hello<|im_end|>";
    assert_eq!(
        t.encode(text, false, true).unwrap(),
        [1, id(&t, "hello"), 2]
    );
    // As text: every character of the marker is a byte token ("<", "|", ...).
    let plain = t.encode(text, false, false).unwrap();
    assert!(!plain.contains(&1) && !plain.contains(&2));
    assert_eq!(plain[0], byte_id(b'<'));
    assert_eq!(t.decode(&plain, false, true).unwrap(), text);
}

#[test]
fn user_defined_tokens_are_always_split_out() {
    let t = tiny("smollm");
    for parse in [false, true] {
        assert_eq!(
            t.encode("hello<tool>hello", false, parse).unwrap(),
            [id(&t, "hello"), 3, id(&t, "hello")]
        );
    }
}

#[test]
fn adjacent_and_repeated_specials() {
    let t = tiny("smollm");
    assert_eq!(
        t.encode("<|im_end|><|im_end|>\n<|endoftext|>", false, true)
            .unwrap(),
        [2, 2, byte_id(b'\n'), 0]
    );
}

#[test]
fn whitespace_runs_keep_the_last_space_for_the_next_word() {
    let t = tiny("smollm");
    let sp = byte_id(b' ');
    let ss = id(&t, "ĠĠ");
    // "a", "  ", " b"
    assert_eq!(
        t.encode("a   b", false, false).unwrap(),
        [byte_id(b'a'), ss, sp, byte_id(b'b')]
    );
    // trailing run stays whole: "ĠĠ" + "Ġ"
    assert_eq!(t.encode("   ", false, false).unwrap(), [ss, sp]);
    // "\n\n\n" is one word: "ĊĊ" + "Ċ"
    assert_eq!(
        t.encode("\n\n\n", false, false).unwrap(),
        [id(&t, "ĊĊ"), byte_id(b'\n')]
    );
    // "\n\nx": the run before a letter gives up its last char: "\n", "\n", "x"
    assert_eq!(
        t.encode("\n\nx", false, false).unwrap(),
        [byte_id(b'\n'), byte_id(b'\n'), byte_id(b'x')]
    );
    for s in ["tab\tsep\t\tend", "  lead", "trail  ", "a \n b", ""] {
        roundtrip(&t, s);
    }
}

#[test]
fn digits_follow_the_pre_tokenizer() {
    // smollm isolates every digit, so the "1 2" merge never applies ...
    let t = tiny("smollm");
    assert_eq!(
        t.encode("123", false, false).unwrap(),
        [byte_id(b'1'), byte_id(b'2'), byte_id(b'3')]
    );
    // ... while GPT-2 keeps digit runs together.
    let t = tiny("gpt-2");
    assert_eq!(
        t.encode("123", false, false).unwrap(),
        [id(&t, "12"), byte_id(b'3')]
    );
}

#[test]
fn empty_text_gives_no_tokens() {
    let t = tiny("smollm");
    assert!(t.encode("", false, true).unwrap().is_empty());
    assert!(t.encode("", true, true).unwrap().is_empty());
}

#[test]
fn bos_eos_only_when_the_model_asks() {
    let mut p = parts("smollm");
    p.add_bos = Some(true);
    p.add_eos = Some(true);
    let t = Tokenizer::from_parts(p).unwrap();
    assert_eq!(
        t.encode("hello", true, false).unwrap(),
        [1, id(&t, "hello"), 2]
    );
    assert_eq!(t.encode("hello", false, false).unwrap(), [id(&t, "hello")]);
    let ids = t.encode("hello", true, false).unwrap();
    assert_eq!(t.decode(&ids, true, true).unwrap(), "hello");
    assert_eq!(
        t.decode(&ids, false, true).unwrap(),
        "<|im_start|>hello<|im_end|>"
    );
    // SmolLM: add_bos absent -> false for the smollm pre-tokenizer.
    assert!(!tiny("smollm").add_bos());
    // LLaMA-3 style pre-tokenizers default to adding BOS.
    assert!(tiny("llama-bpe").add_bos());
}

#[test]
fn bos_eos_default_to_11_like_llama_cpp() {
    let mut p = parts("smollm");
    p.bos_id = None;
    p.eos_id = None;
    let t = Tokenizer::from_parts(p).unwrap();
    assert_eq!(t.bos(), Some(11));
    assert_eq!(t.eos(), Some(11));
}

/// Issue 16 item 10: an id the file gives that is not a token is an error
/// naming the key (llama.cpp warns and falls back to the default, which
/// silently changes the prompt the model sees).
#[test]
fn out_of_range_special_ids_are_errors() {
    let mut p = parts("smollm");
    p.eos_id = Some(100_000);
    let n = p.tokens.len();
    assert_eq!(
        Tokenizer::from_parts(p).err(),
        Some(TokenizerError::SpecialOutOfRange {
            key: "eos_token_id",
            id: 100_000,
            n_vocab: n
        })
    );
}

#[test]
fn control_tokens_render_only_when_unparsed() {
    let t = tiny("smollm");
    let ids = [1, id(&t, "hello"), 3, 2];
    assert_eq!(
        t.decode(&ids, false, true).unwrap(),
        "<|im_start|>hello<tool><|im_end|>"
    );
    assert_eq!(t.decode(&ids, false, false).unwrap(), "hello<tool>");
    assert_eq!(t.token_to_piece_with(1, 0, false).unwrap(), b"");
    assert_eq!(t.token_to_piece(1).unwrap(), b"<|im_start|>");
    let w = id(&t, "Ġworld");
    assert_eq!(t.token_to_piece_with(w, 1, true).unwrap(), b"world");
}

#[test]
fn end_of_generation_tokens() {
    let t = tiny("smollm");
    assert!(t.is_eog(0) && t.is_eog(2));
    assert!(!t.is_eog(1) && !t.is_eog(3));
    assert_eq!(t.eog_ids(), [0, 2]);
    // no eot id given: "<|im_end|>" comes first in llama.cpp's list of texts
    assert_eq!(t.eot(), Some(2));
    assert_eq!(t.n_vocab(), 4 + 256 + MERGES.len());
}

#[test]
fn eog_looking_tokens_become_control() {
    let mut p = parts("smollm");
    p.token_types[2] = NORMAL; // "<|im_end|>" mistyped as normal
    let t = Tokenizer::from_parts(p).unwrap();
    assert_eq!(t.token_type(2).unwrap(), TokenType::Control);
    assert_eq!(t.encode("<|im_end|>", false, true).unwrap(), [2]);
}

#[test]
fn clean_spaces_only_for_pre_tokenizers_that_keep_them() {
    let text = "hello , world ' s";
    let t = tiny("gpt-2");
    let ids = t.encode(text, false, false).unwrap();
    assert_eq!(t.decode(&ids, false, true).unwrap(), "hello, world's");
    let t = tiny("smollm");
    let ids = t.encode(text, false, false).unwrap();
    assert_eq!(t.decode(&ids, false, true).unwrap(), text);
}

#[test]
fn clean_spaces_passes() {
    let run = |s: &str| {
        let mut v = s.as_bytes().to_vec();
        clean_spaces(&mut v);
        String::from_utf8(v).unwrap()
    };
    assert_eq!(run("a ? b ! c . d ,"), "a? b! c. d,");
    assert_eq!(run("rock ' n ' roll"), "rock'n'roll");
    // llama.cpp blanks the dropped space in place, so it cannot serve a second time
    assert_eq!(run("a ' ' b"), "a'' b");
    assert_eq!(
        run("it 's I 'm we 're they 've don 't I 'd we 'll"),
        "it's I'm we're they've don 't I 'd we 'll"
    );
}

#[test]
fn errors() {
    let mut p = parts("smollm");
    p.model = "t5".into();
    assert_eq!(
        Tokenizer::from_parts(p).unwrap_err(),
        TokenizerError::UnsupportedModel("t5".into())
    );
    let mut p = parts("smollm");
    p.token_types.pop();
    assert!(matches!(
        Tokenizer::from_parts(p),
        Err(TokenizerError::LengthMismatch {
            what: "token_types",
            ..
        })
    ));
    let t = tiny("smollm");
    let n = t.n_vocab() as u32;
    assert!(matches!(
        t.decode(&[n], false, true),
        Err(TokenizerError::TokenOutOfRange { .. })
    ));
    let mut p = parts("smollm");
    p.tokens.clear();
    p.token_types.clear();
    assert_eq!(
        Tokenizer::from_parts(p).unwrap_err(),
        TokenizerError::EmptyVocab
    );
}

#[test]
fn unknown_pre_tokenizer_falls_back_to_default() {
    let t = tiny("no-such-pre");
    roundtrip(&t, "x = 1000000; y's");
    // default rules isolate punctuation runs first, then split digits in threes
    assert_eq!(
        t.pre_tokenizer().unwrap().split("1234567"),
        ["123", "456", "7"]
    );
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Byte-level BPE loses nothing: any text (special markers treated as text) comes back.
        #[test]
        fn encode_decode_round_trips(s in "\\PC{0,40}|[ \\t\\n<|>a-z0-9'é😀你]{0,40}") {
            let t = tiny("smollm");
            let ids = t.encode(&s, false, false).unwrap();
            prop_assert_eq!(t.decode(&ids, false, true).unwrap(), s.clone());
            // every piece of a word is a vocabulary token, never a control token
            prop_assert!(ids.iter().all(|&id| t.token_type(id).unwrap() == TokenType::Normal));
        }

        /// Pre-tokenization partitions the text: the words concatenate back to it.
        #[test]
        fn pre_tokenizers_partition_text(s in "\\PC{0,40}|[ \\t\\r\\n'a-zA-Z0-9.,!]{0,40}") {
            for pre in ["smollm", "gpt-2", "llama-bpe", "qwen2", "default", "falcon", "deepseek-coder"] {
                let t = tiny(pre);
                let words = t.pre_tokenizer().unwrap().split(&s);
                prop_assert_eq!(words.concat(), s.clone());
                prop_assert!(words.iter().all(|w| !w.is_empty()));
            }
        }
    }
}

/// SentencePiece (`llama`) vocabulary: ids 0..3 specials, 3..259 `<0xAB>` byte tokens, then
/// pieces whose score grows with length so that longer merges win.
mod spm_vocab {
    use super::*;

    const PIECES: &[&str] = &[
        "▁", "▁h", "▁he", "▁hel", "▁hell", "▁hello", "h", "e", "l", "o", "w", "r", "d", "▁w", "or",
        "▁wor", "ld", "▁world", "▁▁",
    ];

    fn spm_parts() -> TokenizerParts {
        let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
        let mut types = vec![2, CONTROL, CONTROL];
        let mut scores = vec![0.0, 0.0, 0.0];
        for b in 0..=255u8 {
            tokens.push(format!("<0x{b:02X}>"));
            types.push(6);
            scores.push(0.0);
        }
        for p in PIECES {
            tokens.push(p.to_string());
            types.push(NORMAL);
            scores.push(p.chars().count() as f32);
        }
        TokenizerParts {
            model: "llama".into(),
            tokens,
            token_types: types,
            scores: Some(scores),
            ..Default::default()
        }
    }

    fn spm() -> Tokenizer {
        Tokenizer::from_parts(spm_parts()).unwrap()
    }

    #[test]
    fn llama_defaults() {
        let t = spm();
        assert!(!t.is_bpe());
        assert!(t.pre_tokenizer().is_none());
        assert_eq!((t.bos(), t.eos(), t.unk()), (Some(1), Some(2), Some(0)));
        assert!(t.add_bos() && !t.add_eos());
        assert_eq!(t.n_merges(), 0);
    }

    #[test]
    fn score_merges_with_space_prefix() {
        let t = spm();
        let ids = t.encode("hello world", true, true).unwrap();
        assert_eq!(ids, [1, id(&t, "▁hello"), id(&t, "▁world")]);
        // no BOS without add_special; the space prefix is still added
        assert_eq!(t.encode("hello", false, true).unwrap(), [id(&t, "▁hello")]);
        // OG SentencePiece: "" gives [BOS] with add_special, else nothing
        assert_eq!(t.encode("", true, true).unwrap(), [1]);
        assert!(t.encode("", false, true).unwrap().is_empty());
    }

    #[test]
    fn unknown_text_falls_back_to_byte_tokens() {
        let t = spm();
        let ids = t.encode("é", false, false).unwrap();
        assert_eq!(ids, [id(&t, "▁"), 3 + 0xC3, 3 + 0xA9]);
        assert_eq!(t.token_to_piece(3 + 0xC3).unwrap(), [0xC3]);
        assert_eq!(t.decode(&ids, false, true).unwrap(), "é");
    }

    #[test]
    fn space_prefix_after_special_tokens_only() {
        let t = spm();
        // "<s>" cut out: the text after it gets a prefix space again
        let ids = t.encode("<s>hello", false, true).unwrap();
        assert_eq!(ids, [1, id(&t, "▁hello")]);
        let ids = t.encode("hello<s>world", false, true).unwrap();
        assert_eq!(ids, [id(&t, "▁hello"), 1, id(&t, "▁world")]);
    }

    #[test]
    fn decode_strips_the_added_space_like_llama_cpp() {
        let t = spm();
        let ids = t.encode("hello world", true, true).unwrap();
        // BOS kept: its piece gets the lstrip, the words keep their spaces
        assert_eq!(t.decode(&ids, false, true).unwrap(), "<s> hello world");
        // BOS removed: llama.cpp then keeps the leading space
        assert_eq!(t.decode(&ids, true, true).unwrap(), " hello world");
        // no BOS at all: the first piece loses its prefix space
        assert_eq!(t.decode(&ids[1..], false, true).unwrap(), "hello world");
        // unparse_special = false: BOS renders as nothing but still takes the lstrip
        assert_eq!(t.decode(&ids, false, false).unwrap(), " hello world");
    }

    #[test]
    fn add_space_prefix_can_be_turned_off() {
        let mut p = spm_parts();
        p.add_space_prefix = Some(false);
        let t = Tokenizer::from_parts(p).unwrap();
        assert_eq!(
            t.encode("hello", false, false).unwrap(),
            [
                id(&t, "h"),
                id(&t, "e"),
                id(&t, "l"),
                id(&t, "l"),
                id(&t, "o")
            ]
        );
        let ids = t.encode(" hello", false, false).unwrap();
        assert_eq!(ids, [id(&t, "▁hello")]);
        assert_eq!(t.decode(&ids, false, true).unwrap(), " hello");
    }

    #[test]
    fn missing_byte_token_is_an_error() {
        let mut p = spm_parts();
        p.tokens[3 + 0xC3] = "<gone>".into();
        let t = Tokenizer::from_parts(p).unwrap();
        assert_eq!(
            t.encode("é", false, false).unwrap_err(),
            TokenizerError::MissingByteToken(0xC3)
        );
    }
}

#[test]
fn fim_and_harmony_tokens_like_llama_cpp() {
    let mut p = parts("smollm");
    for t in [
        "<|fim_prefix|>",
        "<|fim_pad|>",
        "<|return|>",
        "<|call|>",
        "<|end|>",
        "<|channel|>",
    ] {
        p.tokens.push(t.into());
        p.token_types.push(NORMAL);
    }
    let t = Tokenizer::from_parts(p).unwrap();
    let pre = id(&t, "<|fim_prefix|>");
    assert_eq!(t.token_type(pre).unwrap(), TokenType::Control);
    assert!(!t.is_eog(pre));
    assert!(t.is_eog(id(&t, "<|fim_pad|>")));
    assert!(t.is_eog(id(&t, "<|return|>")) && t.is_eog(id(&t, "<|call|>")));
    let end = id(&t, "<|end|>");
    assert!(!t.is_eog(end));
    assert_eq!(t.token_type(end).unwrap(), TokenType::UserDefined);
    let ch = id(&t, "<|channel|>");
    assert_eq!(t.token_type(ch).unwrap(), TokenType::UserDefined);
    // user-defined: split out and rendered even without parse_special / unparse_special
    assert_eq!(t.encode("<|channel|>", false, false).unwrap(), [ch]);
    assert_eq!(t.decode(&[ch], false, false).unwrap(), "<|channel|>");
}
