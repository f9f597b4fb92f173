//! The records of an nvidia-smi log, split as the `csv` crate splits them, most of them
//! without it.
//!
//! nvidia-smi writes plain lines: cells separated by commas, no quotes, one `\n` at the end
//! of each. Such a line is one record whatever the CSV dialect, and splitting it at its
//! commas gives the `csv` crate's fields and line number at a fraction of the cost of its
//! byte-by-byte state machine (on a long log, reading records was a third of the reading
//! thread's work). Everything else — quotes, `\r`, comments, blank lines, a last line
//! without its newline, a byte order mark — is the `csv` crate's to read: at the first such
//! line the rest of the log, that line first, is handed to a `csv` reader for good, its
//! line numbers carried on. The lines before it were all plain, which leaves the crate's
//! parser where any plain record leaves it; the `csv` reader handed the rest is put there
//! by reading one such record first. So the records, their fields and their lines are the
//! same as had it read the whole log.

use std::io::{BufRead, BufReader, Chain, Cursor, Read};

use csv::ByteRecord;

/// Bytes read from the log at a time: as many as the replay's own buffered reader holds
/// (`READ_BUFFER` in src/cli/replay.rs), so that once that one is drained each read goes
/// past it straight into this buffer; a smaller one here had every byte copied twice, a
/// tenth of the reading thread's work on a wide log.
const BUFFER: usize = 1 << 20;

/// A log's records.
pub struct Records<R: Read> {
    mode: Mode<TailWatch<R>>,
}

/// Remembers the last byte read, to tell a log cut mid-line from one that ends with its
/// newline (its last row may then be cut inside its last cell).
struct TailWatch<R> {
    inner: R,
    last: Option<u8>,
}

impl<R: Read> Read for TailWatch<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.last = Some(buf[n - 1]);
        }
        Ok(n)
    }
}

enum Mode<R: Read> {
    /// Plain lines so far, `lines` of them.
    Lines { input: BufReader<R>, lines: u64 },
    /// The `csv` crate reads the rest: the line it was handed first, then the log. Its
    /// line numbers start again and are `lines` short.
    Csv {
        csv: Box<Handed<R>>,
        lines: u64,
        record: ByteRecord,
    },
    /// Only while the log is handed over.
    Handing,
}

/// The `csv` reader of the rest of a log: the line it was handed, then the log.
type Handed<R> = csv::Reader<Chain<Cursor<Vec<u8>>, BufReader<R>>>;

/// How the `csv` crate is set to read nvidia-smi logs: rows of any length (a cut line, a
/// message in place of a row), `#` comments, no header (headers can recur: a restarted
/// nvidia-smi writes one) and no trimming (it rebuilds every record; only the cells
/// replay reads are trimmed, by the row reader).
fn csv_reader<T: Read>(input: T) -> csv::Reader<T> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .from_reader(input)
}

impl<R: Read> Records<R> {
    pub fn new(input: R) -> Records<R> {
        let input = TailWatch {
            inner: input,
            last: None,
        };
        Records {
            mode: Mode::Lines {
                input: BufReader::with_capacity(BUFFER, input),
                lines: 0,
            },
        }
    }

    /// Whether bytes of the log are read and waiting: the next record then comes without
    /// reading the log again, which may wait (a pipe from a running nvidia-smi). False when
    /// unsure (the `csv` crate may hold more of its own).
    pub(crate) fn buffered(&self) -> bool {
        match &self.mode {
            Mode::Lines { input, .. } => !input.buffer().is_empty(),
            Mode::Csv { csv, .. } => !csv.get_ref().get_ref().1.buffer().is_empty(),
            Mode::Handing => false,
        }
    }

    /// Whether the log read so far ends inside a line (no newline after its last byte).
    pub(crate) fn ends_mid_line(&self) -> bool {
        let log = match &self.mode {
            Mode::Lines { input, .. } => input.get_ref(),
            Mode::Csv { csv, .. } => csv.get_ref().get_ref().1.get_ref(),
            Mode::Handing => return false,
        };
        log.last.is_some_and(|b| b != b'\n')
    }

    /// Reads the next record into `cells` (with the line it starts on, as
    /// [`csv::Reader::read_byte_record`] gives it); false at the end of the log.
    pub fn read(&mut self, cells: &mut Cells) -> csv::Result<bool> {
        loop {
            match &mut self.mode {
                Mode::Lines { input, lines, .. } => {
                    cells.clear(*lines + 1);
                    if read_line(input, &mut cells.bytes)? == 0 {
                        return Ok(false);
                    }
                    // The `csv` crate drops a byte order mark before the first record.
                    let mark = *lines == 0 && cells.bytes.starts_with(b"\xEF\xBB\xBF");
                    if !mark && cells.split_plain() {
                        *lines += 1;
                        return Ok(true);
                    }
                    let line = std::mem::take(&mut cells.bytes);
                    self.hand_over(line);
                }
                Mode::Csv { csv, lines, record } => {
                    let more = csv.read_byte_record(record)?;
                    let line = record.position().map_or(0, |at| at.line() + *lines);
                    cells.clear(line);
                    for field in record.iter() {
                        cells.bytes.extend_from_slice(field);
                        cells.ends.push(cells.bytes.len());
                        cells.bytes.push(b',');
                    }
                    return Ok(more);
                }
                Mode::Handing => return Ok(false),
            }
        }
    }

    /// Hands the rest of the log, `line` (the line just read) first, to the `csv` crate.
    fn hand_over(&mut self, line: Vec<u8>) {
        let Mode::Lines { input, lines } = std::mem::replace(&mut self.mode, Mode::Handing) else {
            return;
        };
        // After plain lines the crate's parser would be where it is after reading one plain
        // record: that record is read first, so that a fresh parser is in that state too
        // (it would otherwise drop a byte order mark at the start of the line).
        let primed = lines > 0;
        let head = match primed {
            true => [&b"x\n"[..], &line].concat(),
            false => line,
        };
        let mut csv = csv_reader(Cursor::new(head).chain(input));
        if primed {
            // From memory: it cannot fail.
            let _ = csv.read_byte_record(&mut ByteRecord::new());
        }
        self.mode = Mode::Csv {
            csv: Box::new(csv),
            lines: lines - u64::from(primed),
            record: ByteRecord::new(),
        };
    }
}

/// One record: its cells, in one buffer, and the line it starts on. A plain line is kept
/// as it was read, its cells between its commas; a record the `csv` crate read is copied
/// in, a comma after each cell.
#[derive(Debug, Default)]
pub struct Cells {
    bytes: Vec<u8>,
    /// Where each cell ends; the next starts one byte after.
    ends: Vec<usize>,
    line: u64,
}

impl Cells {
    /// Empties the record, keeping its buffers, and sets its line.
    pub fn clear(&mut self, line: u64) {
        self.bytes.clear();
        self.ends.clear();
        self.line = line;
    }

    /// The line the record starts on (1-based).
    pub fn line(&self) -> u64 {
        self.line
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn get(&self, i: usize) -> Option<&[u8]> {
        let end = *self.ends.get(i)?;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] + 1,
        };
        self.bytes.get(start..end)
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let cell = self.bytes.get(start..end).unwrap_or_default();
            start = end + 1;
            cell
        })
    }

    /// Splits the plain line in `bytes` (cells and commas, then `\n`) at its commas; false
    /// for any other line.
    fn split_plain(&mut self) -> bool {
        let Some((b'\n', cells)) = self.bytes.split_last() else {
            return false;
        };
        if cells.is_empty() || cells[0] == b'#' || memchr::memchr2(b'"', b'\r', cells).is_some() {
            return false;
        }
        commas(cells, &mut self.ends);
        self.ends.push(cells.len());
        true
    }
}

/// [`BufRead::read_until`] a `\n`, the same bytes appended and counted: that one looks for
/// the newline with the standard library's portable search, a word at a time, this one with
/// the `memchr` crate's vector search (finding each line's end was a fifth of splitting a
/// narrow log's records).
fn read_line(input: &mut impl BufRead, out: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut read = 0;
    loop {
        let (done, used) = {
            let available = match input.fill_buf() {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            match memchr::memchr(b'\n', available) {
                Some(i) => {
                    out.extend_from_slice(&available[..=i]);
                    (true, i + 1)
                }
                None => {
                    out.extend_from_slice(available);
                    (false, available.len())
                }
            }
        };
        input.consume(used);
        read += used;
        if done || used == 0 {
            return Ok(read);
        }
    }
}

/// Appends the position of every comma in `bytes` to `out`, eight bytes at a time: a row
/// has a comma every few bytes, too often for a search per comma to pay.
fn commas(bytes: &[u8], out: &mut Vec<usize>) {
    const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    const COMMAS: u64 = 0x2c2c_2c2c_2c2c_2c2c;
    let mut words = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in words.by_ref() {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word) ^ COMMAS;
        // The high bit of each byte that is zero (a comma before the xor), exactly: no
        // borrow runs from one byte into the next.
        let mut zero = !(((x & LOW).wrapping_add(LOW)) | x | LOW);
        while zero != 0 {
            out.push(at + zero.trailing_zeros() as usize / 8);
            zero &= zero - 1;
        }
        at += 8;
    }
    for (i, &b) in words.remainder().iter().enumerate() {
        if b == b',' {
            out.push(at + i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Read = Vec<(u64, Vec<Vec<u8>>)>;

    /// Every record of `text` with its line, as read here and by the `csv` crate alone.
    fn both(text: &str) -> (Read, Read) {
        let mut ours = Vec::new();
        let mut records = Records::new(text.as_bytes());
        let mut cells = Cells::default();
        while records.read(&mut cells).unwrap_or(false) {
            ours.push((cells.line(), cells.iter().map(<[u8]>::to_vec).collect()));
        }
        let mut theirs = Vec::new();
        let mut csv = csv_reader(text.as_bytes());
        let mut record = ByteRecord::new();
        let line = |r: &ByteRecord| r.position().map_or(0, |p| p.line());
        while csv.read_byte_record(&mut record).unwrap_or(false) {
            theirs.push((line(&record), record.iter().map(<[u8]>::to_vec).collect()));
        }
        assert_eq!(
            cells.line(),
            line(&record),
            "the line at the end of {text:?}"
        );
        (ours, theirs)
    }

    #[test]
    fn records_and_lines_are_the_csv_crates() {
        for text in [
            "a, b,c\n1,2,3\n",
            "a,b\n1,2",
            "a,b\n\n1,2\n",
            "a,b\n# note\n1,2\n",
            "a,b\r\n1,2\r\n3,4\n",
            "a,b\n\"x,y\",2\n3,4\n",
            "a,b\n\"multi\nline\",2\n3,4\n",
            "a,,\n,\n",
            "\u{feff}a,b\n1,2\n",
            "a,b\n\u{feff}\"x\",1\n2,3\n",
            "",
            "\n",
        ] {
            let (ours, theirs) = both(text);
            assert_eq!(ours, theirs, "{text:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(512))]
        /// Any text of the bytes that switch between the two readers (quotes, carriage
        /// returns, comments, blank lines, byte-order marks, commas, spaces) gives the
        /// records and lines the `csv` crate gives alone.
        #[test]
        fn any_mix_of_plain_and_other_lines_reads_as_the_csv_crate_reads_it(
            text in "[a1 ,\"\r\n#\u{feff}]{0,120}"
        ) {
            let (ours, theirs) = both(&text);
            proptest::prop_assert_eq!(ours, theirs, "{:?}", text);
        }
    }

    #[test]
    fn lines_are_read_as_read_until_reads_them() {
        for text in [&b""[..], b"\n", b"a", b"a\nb", b"a,b\n\nc\n", b"\n\nxyz"] {
            // Small buffers: lines that cross the buffer's end.
            for capacity in [1, 2, 64] {
                let mut ours = std::io::BufReader::with_capacity(capacity, text);
                let mut theirs = std::io::BufReader::with_capacity(capacity, text);
                loop {
                    let (mut a, mut b) = (b"x".to_vec(), b"x".to_vec());
                    let n = read_line(&mut ours, &mut a).expect("from memory");
                    let m = theirs.read_until(b'\n', &mut b).expect("from memory");
                    assert_eq!((n, &a), (m, &b), "{text:?}");
                    if n == 0 {
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn commas_are_found_in_every_position() {
        // 0xac is a comma with the high bit set; 0x2b and 0x2d are its neighbours.
        for text in [
            &b""[..],
            b",",
            b"a,b",
            b",,,,,,,,,",
            b"abcdefgh,ijklmnop,",
            b"\xff,\x2d,\x2b,\x7f\xac\x00,\xac\xac,\x2c",
        ] {
            let mut found = Vec::new();
            commas(text, &mut found);
            let wanted: Vec<usize> = (text.iter().enumerate())
                .filter(|(_, b)| **b == b',')
                .map(|(i, _)| i)
                .collect();
            assert_eq!(found, wanted, "{text:?}");
        }
    }

    #[test]
    fn plain_lines_are_split_here() {
        let mut cells = Cells {
            bytes: b"2026/07/14 08:12:38.696, 0, 41 %\n".to_vec(),
            ..Cells::default()
        };
        assert!(cells.split_plain());
        assert_eq!(cells.len(), 3);
        assert_eq!(cells.get(2), Some(&b" 41 %"[..]));
        for other in [&b"a,\"b\"\n"[..], b"a,b\r\n", b"# c\n", b"\n", b"a,b"] {
            let mut cells = Cells {
                bytes: other.to_vec(),
                ..Cells::default()
            };
            assert!(!cells.split_plain(), "{other:?}");
        }
    }
}
