//! A strict JSON reader for the two texts read on every call: the client's JSON-RPC
//! envelope and the upstream's answer. It checks the whole text by the grammar serde_json
//! applies (RFC 8259: no trailing commas, no leading zeros, no raw control bytes in
//! strings, valid escapes) and hands back borrowed slices of it, in one pass and without
//! allocating. It reads only what it can be sure of: a key with an escape in it, nesting
//! deeper than [`MAX_DEPTH`] or anything malformed makes it give up (`None`), and the
//! caller then reads the text with serde_json, whose answer (and error message) stands.
//! So this reader can only ever agree with serde_json or step aside; the tests in
//! `pipeline::jsonrpc` and `audit` hold it to that on every input they try.

/// Deeper than this the reader gives up (serde_json's own limit is 128).
pub const MAX_DEPTH: u32 = 64;

/// A key, as written between its quotes.
#[derive(Clone, Copy)]
pub struct Key<'a> {
    pub raw: &'a str,
    /// Whether it holds a backslash escape, so `raw` is not its decoded text.
    pub escaped: bool,
}

impl<'a> Key<'a> {
    /// The key's text when it has no escape; `None` (give up) otherwise.
    pub fn plain(self) -> Option<&'a str> {
        (!self.escaped).then_some(self.raw)
    }
}

pub struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(text: &'a str) -> Self {
        Reader { text, at: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    #[inline(always)]
    pub fn skip_ws(&mut self) {
        self.at = past_ws(self.bytes(), self.at);
    }

    pub fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        self.at += usize::from(hit);
        hit
    }

    fn expect(&mut self, b: u8) -> Option<()> {
        self.eat(b).then_some(())
    }

    /// Whether only whitespace is left.
    pub fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.at == self.text.len()
    }

    /// One value of any kind, checked; returns its text, from its first byte to its last.
    pub fn value(&mut self, depth: u32) -> Option<&'a str> {
        let start = self.at;
        self.skip(depth)?;
        Some(&self.text[start..self.at])
    }

    /// One value of any kind, checked and passed over. `depth` is the value's own nesting
    /// depth.
    #[inline(always)]
    pub fn skip(&mut self, depth: u32) -> Option<()> {
        let bytes = self.bytes();
        let i = self.at;
        self.at = match *bytes.get(i)? {
            b'{' | b'[' => past_container(bytes, i, depth)?,
            _ => past_scalar(bytes, i)?,
        };
        Some(())
    }

    /// An object; `each` is called at each member's value (whitespace skipped) and must
    /// read that value. `depth` is the object's own nesting depth.
    pub fn object(
        &mut self,
        depth: u32,
        mut each: impl FnMut(&mut Self, Key<'a>) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.expect(b'{')?;
        self.skip_ws();
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            self.skip_ws();
            let start = self.at + 1;
            let escaped = self.string()?;
            let key = Key {
                raw: &self.text[start..self.at - 1],
                escaped,
            };
            self.skip_ws();
            self.expect(b':')?;
            self.skip_ws();
            each(self, key)?;
            self.skip_ws();
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string, from its opening quote; whether it holds an escape.
    #[inline(always)]
    fn string(&mut self) -> Option<bool> {
        let (end, escaped) = past_string(self.bytes(), self.at)?;
        self.at = end;
        Some(escaped)
    }

    /// A string value with no escape in it: its text between the quotes.
    pub fn plain_string(&mut self) -> Option<&'a str> {
        let start = self.at + 1;
        match self.string()? {
            false => Some(&self.text[start..self.at - 1]),
            true => None,
        }
    }
}

/// Whether the JSON text nests objects and arrays more than `limit` deep (a top-level
/// object is 1 deep). One pass over the bytes, brackets inside strings passed over, that
/// stops at the first container past the limit; it does not check the grammar (a text
/// that is not JSON is refused by the parser after it). A parser that reads a value whole
/// without recursion (serde_json's `RawValue`) takes any depth; the server behind may not.
pub fn deeper_than(text: &[u8], limit: u32) -> bool {
    // No deeper than it has opening brackets: most bodies have fewer than the limit, and
    // finding them (memchr's vector search) costs far less than following the text.
    let brackets = memchr::memchr2_iter(b'{', b'[', text).take(limit as usize + 1);
    if brackets.count() <= limit as usize {
        return false;
    }
    let mut depth = 0u32;
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        match b {
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                // To the closing quote: a backslash takes the byte after it along.
                i += 1;
                while let Some(&c) = text.get(i) {
                    match c {
                        b'"' => break,
                        b'\\' => i += 2,
                        _ => i += 1,
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// Past the object or array that opens at `i`, at nesting depth `depth`. Read in one loop
/// rather than by recursion: the containers open are a stack of bits (1 an object, 0 an
/// array), innermost lowest.
fn past_container(bytes: &[u8], mut i: usize, depth: u32) -> Option<usize> {
    let mut open = 0u32;
    let mut objects = 0u128;
    'value: loop {
        // A value starts at `i`, whitespace passed.
        match *bytes.get(i)? {
            b @ (b'{' | b'[') => {
                // `open` stays within 65, the bits `objects` holds.
                if depth + open > MAX_DEPTH {
                    return None;
                }
                let object = b == b'{';
                i = past_ws(bytes, i + 1);
                if bytes.get(i) == Some(if object { &b'}' } else { &b']' }) {
                    i += 1;
                } else {
                    open += 1;
                    objects = objects << 1 | u128::from(object);
                    if object {
                        i = past_key(bytes, i)?;
                    }
                    continue 'value;
                }
            }
            _ => i = past_scalar(bytes, i)?,
        }
        // After a value: close what it ends, or go on to the next member.
        loop {
            if open == 0 {
                return Some(i);
            }
            i = past_ws(bytes, i);
            let object = objects & 1 == 1;
            match *bytes.get(i)? {
                b',' => {
                    i = past_ws(bytes, i + 1);
                    if object {
                        i = past_key(bytes, i)?;
                    }
                    continue 'value;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return None,
            }
            i += 1;
            open -= 1;
            objects >>= 1;
        }
    }
}

/// Past the string, number or literal that starts at `i`.
#[inline(always)]
fn past_scalar(bytes: &[u8], i: usize) -> Option<usize> {
    match *bytes.get(i)? {
        b'"' => Some(past_string(bytes, i)?.0),
        b't' => past_literal(bytes, i, b"true"),
        b'f' => past_literal(bytes, i, b"false"),
        b'n' => past_literal(bytes, i, b"null"),
        b'-' | b'0'..=b'9' => past_number(bytes, i),
        _ => None,
    }
}

/// Where the whitespace from `i` ends.
#[inline(always)]
fn past_ws(bytes: &[u8], mut i: usize) -> usize {
    // Compact JSON has none: one comparison passes a structural byte.
    while let Some(&b) = bytes.get(i) {
        if b > b' ' || !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
            break;
        }
        i += 1;
    }
    i
}

/// Past an object member's key and its colon, to where its value starts.
#[inline(always)]
fn past_key(bytes: &[u8], i: usize) -> Option<usize> {
    let i = past_ws(bytes, past_string(bytes, i)?.0);
    (bytes.get(i) == Some(&b':')).then(|| past_ws(bytes, i + 1))
}

/// Past the string whose opening quote is at `i`; and whether it holds an escape.
#[inline(always)]
fn past_string(bytes: &[u8], i: usize) -> Option<(usize, bool)> {
    if bytes.get(i) != Some(&b'"') {
        return None;
    }
    let mut i = i + 1;
    let mut escaped = false;
    loop {
        // Runs of bytes that end nothing are passed over a word at a time.
        while let Some(word) = bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
            let mask = crate::json::text::escape_mask(u64::from_le_bytes(*word));
            if mask != 0 {
                i += mask.trailing_zeros() as usize / 8;
                break;
            }
            i += 8;
        }
        let b = *bytes.get(i)?;
        i += 1;
        match b {
            b'"' => return Some((i, escaped)),
            b'\\' => {
                escaped = true;
                match *bytes.get(i)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => i += 1,
                    b'u' => {
                        let hex = bytes.get(i + 1..i + 5)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        i += 5;
                    }
                    _ => return None,
                }
            }
            0..=0x1f => return None,
            _ => {}
        }
    }
}

fn past_literal(bytes: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    let end = i + word.len();
    (bytes.get(i..end)? == word).then_some(end)
}

/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
fn past_number(bytes: &[u8], mut i: usize) -> Option<usize> {
    let digits = |from: usize| {
        from + bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };
    // At least one digit from `from`.
    let digits1 = |from: usize| Some(digits(from)).filter(|&end| end > from);
    i += usize::from(bytes.get(i) == Some(&b'-'));
    match *bytes.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits(i + 1),
        _ => return None,
    }
    if bytes.get(i) == Some(&b'.') {
        i = digits1(i + 1)?;
    }
    if let Some(b'e' | b'E') = bytes.get(i) {
        i += 1;
        i += usize::from(matches!(bytes.get(i), Some(b'+' | b'-')));
        i = digits1(i)?;
    }
    Some(i)
}

/// The keys an object has shown so far, to refuse one seen twice (compared as written,
/// which is exact for keys without escapes). Gives up past [`Seen::MAX`] keys.
pub struct Seen<'a> {
    keys: [&'a str; Seen::MAX],
    len: usize,
}

impl<'a> Seen<'a> {
    const MAX: usize = 16;

    pub fn new() -> Self {
        Seen {
            keys: [""; Seen::MAX],
            len: 0,
        }
    }

    /// Notes `key`; `None` when it was already seen or there are too many to keep.
    pub fn first(&mut self, key: &'a str) -> Option<()> {
        if self.len == Seen::MAX || self.keys[..self.len].contains(&key) {
            return None;
        }
        self.keys[self.len] = key;
        self.len += 1;
        Some(())
    }
}

impl Default for Seen<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// Random edits of `seeds` (one to three per text: a piece put in, a character taken out,
/// or one replaced by a piece; the pieces are JSON's punctuation and literals and the
/// caller's `bits`), the same for the same `seed`: the inputs on which the tests hold
/// this reader's users to serde_json.
pub fn edits(seeds: &[&str], bits: &[&str], seed: u64, count: usize) -> Vec<String> {
    const JSON: &[&str] = &[
        "{", "}", "[", "]", "\"", ",", ":", "\\", " ", "\n", "0", "1", "-", ".", "e", "null",
        "true", "{}", "[]",
    ];
    let bits: Vec<&str> = JSON.iter().chain(bits).copied().collect();
    let mut state = seed;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    (0..count)
        .map(|_| {
            let mut text = seeds[next(seeds.len())].to_string();
            for _ in 0..1 + next(3) {
                let cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
                let at = cuts[next(cuts.len())];
                let end = text[at..].chars().next().map_or(at, |c| at + c.len_utf8());
                match next(3) {
                    0 => text.insert_str(at, bits[next(bits.len())]),
                    1 => text.replace_range(at..end, ""),
                    _ => text.replace_range(at..end, bits[next(bits.len())]),
                }
            }
            text
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_containers_not_brackets_in_strings() {
        assert!(!deeper_than(b"1", 0));
        assert!(deeper_than(b"[]", 0));
        assert!(!deeper_than(b"[]", 1));
        assert!(!deeper_than(br#"{"a":[1,{"b":2}],"c":{}}"#, 3));
        assert!(deeper_than(br#"{"a":[1,{"b":2}],"c":{}}"#, 2));
        assert!(!deeper_than(br#"{"a":"[[[[{{{{\"[[["}"#, 1));
        assert!(!deeper_than(br#"{"a\\":"]]]"}"#, 1));
        assert!(deeper_than(br#"{"a\\":[["x"]]}"#, 2));
        // As many brackets as the limit allows, or more but in strings or side by side.
        assert!(!deeper_than(b"[[[]]]", 3));
        assert!(deeper_than(b"[[[]]]", 2));
        assert!(!deeper_than(br#"[{},[],{"a":"[[[["}]"#, 2));
        assert!(deeper_than(br#"[{},[],{"a":["[[["]}]"#, 2));
        let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        assert!(deeper_than(deep.as_bytes(), 64));
        assert!(!deeper_than(deep.as_bytes(), 200_000));
    }

    fn whole(text: &str) -> Option<&str> {
        let mut r = Reader::new(text);
        r.skip_ws();
        let v = r.value(0)?;
        r.at_end().then_some(v)
    }

    /// Every text the reader takes, serde_json takes too; and on these, both agree.
    #[test]
    fn accepts_what_serde_json_accepts() {
        let good = [
            "0",
            "-0",
            "-12.5e+3",
            "1E9",
            "0.001",
            "true",
            "null",
            r#""a\"b\\c\/\b\f\n\r\t\u00e9\uD800""#,
            "\"é ü 日本\"",
            "[]",
            "[ 1 , [2, {}] ]",
            r#"{"a":{"b":[null,false]},"c":"d"}"#,
            " {\n\t\"k\" : 1 } ",
            r#"{"k\u0041":1}"#,
        ];
        for text in good {
            assert!(whole(text).is_some(), "reader refused {text:?}");
            assert!(
                serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok(),
                "{text:?}"
            );
        }
        let bad = [
            "",
            "01",
            "-",
            "1.",
            ".5",
            "1e",
            "+1",
            "tru",
            "nul",
            "[1,]",
            "{,}",
            r#"{"a":1,}"#,
            r#"{"a"}"#,
            r#"{a:1}"#,
            "\"a",
            "\"\u{1}\"",
            r#""\x""#,
            r#""\u12g4""#,
            "[1 2]",
            "[1}",
            r#"{"a":1]"#,
            r#"[{"a":[1}]}]"#,
            r#"{"a":{"b":1},}"#,
            r#"[[],[{}],"#,
            "{} {}",
            "'a'",
            "NaN",
            "[",
        ];
        for text in bad {
            assert!(whole(text).is_none(), "reader took {text:?}");
            assert!(
                serde_json::from_str::<serde::de::IgnoredAny>(text).is_err(),
                "{text:?}"
            );
        }
    }

    #[test]
    fn values_are_their_own_text() {
        let mut r = Reader::new(r#"{"id" : 7 , "p": {"x": [1, "y"]} }"#);
        let mut got = Vec::new();
        r.object(0, |r, key| {
            got.push((key.raw, r.value(1)?));
            Some(())
        })
        .unwrap();
        assert_eq!(got, [("id", "7"), ("p", r#"{"x": [1, "y"]}"#)]);
    }

    #[test]
    fn gives_up_deep_down() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(whole(&deep(MAX_DEPTH as usize + 1)).is_some());
        assert!(whole(&deep(MAX_DEPTH as usize + 2)).is_none());
        // Objects and arrays in turn, closed in the right order.
        let mixed = |n: usize| {
            let open: String = (0..n)
                .map(|k| if k % 2 == 0 { "{\"k\":" } else { "[" })
                .collect();
            let close: String = (0..n)
                .rev()
                .map(|k| if k % 2 == 0 { "}" } else { "]" })
                .collect();
            format!("{open}0{close}")
        };
        assert!(whole(&mixed(MAX_DEPTH as usize + 1)).is_some());
        assert!(whole(&mixed(MAX_DEPTH as usize + 2)).is_none());
        // Far past serde_json's limit too, and no stack overflow.
        assert!(whole(&deep(100_000)).is_none());
    }

    #[test]
    fn repeated_keys_are_seen() {
        let mut seen = Seen::new();
        assert!(seen.first("a").is_some());
        assert!(seen.first("b").is_some());
        assert!(seen.first("a").is_none());
        let mut many = Seen::new();
        let names: Vec<String> = (0..Seen::MAX + 1).map(|i| i.to_string()).collect();
        let taken = names.iter().filter(|n| many.first(n).is_some()).count();
        assert_eq!(taken, Seen::MAX);
    }
}
