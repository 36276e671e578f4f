//! Newline-delimited messages read from a child's stdout or stderr (and from an HTTP
//! upstream's never-ending JSON-lines answer, `mcp::transport::lines`), bounded: a line longer
//! than the limit is skipped to its end and reported, never held whole, so a child that
//! writes without a newline cannot take the gateway's memory.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// How much is asked of the pipe at a time.
const READ_CHUNK: usize = 64 << 10;

pub struct Lines<R> {
    io: R,
    buf: BytesMut,
    max: usize,
    /// Where the search for the next newline goes on (bytes before it hold none).
    scanned: usize,
    /// Inside a line already found too long: bytes are dropped until its newline.
    skipping: bool,
}

/// What one read gives.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A line without its `\n` (and `\r`).
    Text(Bytes),
    /// A line over the limit, skipped; its length so far.
    TooLong(usize),
}

impl<R: AsyncRead + Unpin> Lines<R> {
    pub fn new(io: R, max: usize) -> Lines<R> {
        Lines {
            io,
            buf: BytesMut::new(),
            max,
            scanned: 0,
            skipping: false,
        }
    }

    /// The next line; `None` at the end of the stream (a last line without a newline is
    /// given first) or on a read error.
    pub async fn next(&mut self) -> Option<Line> {
        let mut skipped = 0usize;
        loop {
            if let Some(at) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
                let end = self.scanned + at;
                let mut line = self.buf.split_to(end + 1);
                self.scanned = 0;
                if std::mem::take(&mut self.skipping) || end > self.max {
                    return Some(Line::TooLong(skipped + end));
                }
                line.truncate(end);
                if line.last() == Some(&b'\r') {
                    line.truncate(end - 1);
                }
                return Some(Line::Text(line.freeze()));
            }
            self.scanned = self.buf.len();
            if self.buf.len() > self.max {
                // Drop what is held of it; the rest is dropped as it comes.
                self.skipping = true;
                skipped += self.buf.len();
                self.buf.clear();
                self.scanned = 0;
            }
            self.buf.reserve(READ_CHUNK);
            match self.io.read_buf(&mut self.buf).await {
                Ok(n) if n > 0 => {}
                _ => {
                    if self.skipping {
                        self.skipping = false;
                        let n = skipped + self.buf.len();
                        self.buf.clear();
                        self.scanned = 0;
                        return Some(Line::TooLong(n));
                    }
                    if self.buf.is_empty() {
                        return None;
                    }
                    self.scanned = 0;
                    let mut line = self.buf.split();
                    if line.last() == Some(&b'\r') {
                        line.truncate(line.len() - 1);
                    }
                    return Some(Line::Text(line.freeze()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn all(input: &[u8], max: usize) -> Vec<Line> {
        let mut lines = Lines::new(input, max);
        let mut out = Vec::new();
        while let Some(l) = lines.next().await {
            out.push(l);
        }
        out
    }

    fn text(s: &str) -> Line {
        Line::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[tokio::test]
    async fn lines_are_split_and_bounded() {
        assert_eq!(
            all(b"{\"a\":1}\n{\"b\":2}\r\n\nlast", 100).await,
            [text("{\"a\":1}"), text("{\"b\":2}"), text(""), text("last")]
        );
        // A runaway line is skipped to its newline; the next one is read as usual.
        let mut input = vec![b'x'; 300_000];
        input.extend_from_slice(b"\nok\n");
        let got = all(&input, 1000).await;
        assert_eq!(got[1], text("ok"));
        assert!(
            matches!(got[0], Line::TooLong(n) if n == 300_000),
            "{:?}",
            got[0]
        );
        assert_eq!(got.len(), 2);
        // One that never ends is reported once at the end of the stream, whatever its last
        // read held (found by the stdio_lines fuzz target).
        let got = all(&[b'y'; 200_000], 1000).await;
        assert!(matches!(got[..], [Line::TooLong(200_000)]), "{got:?}");
        let got = all(&[b'z'; 1500], 1000).await;
        assert!(matches!(got[..], [Line::TooLong(1500)]), "{got:?}");
        assert_eq!(all(b"", 10).await, []);
    }

    proptest::proptest! {
        /// Under the bound, the lines are tokio's own `lines()`' (which we do not use: it
        /// has no bound), for any bytes split into any reads.
        #[test]
        fn lines_match_tokio_s_under_the_bound(
            text in proptest::collection::vec(proptest::sample::select(vec![b'a', b'{', b'\n', b'\r', b' ']), 0..400),
        ) {
            use tokio::io::AsyncBufReadExt;
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let (ours, theirs) = rt.block_on(async {
                let ours: Vec<Vec<u8>> = all(&text, 1 << 20)
                    .await
                    .into_iter()
                    .map(|l| match l {
                        Line::Text(t) => t.to_vec(),
                        Line::TooLong(_) => unreachable!("under the bound"),
                    })
                    .collect();
                let mut theirs = Vec::new();
                let mut lines = tokio::io::BufReader::new(&text[..]).split(b'\n');
                while let Some(mut l) = lines.next_segment().await.unwrap() {
                    if l.last() == Some(&b'\r') {
                        l.pop();
                    }
                    theirs.push(l);
                }
                (ours, theirs)
            });
            proptest::prop_assert_eq!(ours, theirs);
        }
    }
}
