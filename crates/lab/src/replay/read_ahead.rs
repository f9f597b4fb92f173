//! A log's records read on a thread of their own, ahead of the rows' reader.
//!
//! Reading a wide nvidia-smi log (29 columns a row) was the longest stage of a replay: the
//! reading thread took 10,400 instructions a row where the engine's took 5,300, and with the
//! report's, the work of a row was 17,200 — on two cores the replay waited on reading. Reading
//! the bytes and splitting them into records (about a fifth of that stage) on a thread of its
//! own leaves no stage longer than half the work, so the stages share the cores evenly
//! (BENCHMARKS.md, replay). Records go over in batches, and come back emptied to be read
//! into again, so nothing is allocated per record once the batches have grown. A batch goes
//! early when the bytes read so far are used up, so a log piped in while it is written is
//! read as it comes, not in batches' worth.

use std::io::Read;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};

use super::smi_lines::{Cells, Records};

/// Records handed over at a time: as many as the samples of the replay's own batches
/// (`BATCH_SAMPLES` in crates/lab/src/replay/mod.rs), for the same reason.
const RECORDS: usize = 512;

/// Batches in flight.
const IN_FLIGHT: usize = 4;

enum Message {
    Records(Vec<Cells>),
    /// The next record could not be read (an I/O error stops the thread after it).
    Failed(csv::Error),
    /// The log ended: whether inside a line, and the line the reader stopped at (the
    /// records' reader leaves its cells empty at that line).
    End {
        mid_line: bool,
        line: u64,
    },
}

/// Where a log's records come from: read here, or by a thread ahead.
pub(crate) enum RecordSource<R: Read> {
    Here(Records<R>),
    Ahead(ReadAhead),
}

impl<R: Read> RecordSource<R> {
    /// Reads the next record into `cells`, as [`Records::read`] does.
    pub fn read(&mut self, cells: &mut Cells) -> csv::Result<bool> {
        match self {
            RecordSource::Here(records) => records.read(cells),
            RecordSource::Ahead(ahead) => ahead.read(cells),
        }
    }

    /// Whether the log read so far ends inside a line.
    pub(crate) fn ends_mid_line(&self) -> bool {
        match self {
            RecordSource::Here(records) => records.ends_mid_line(),
            RecordSource::Ahead(ahead) => ahead.mid_line,
        }
    }
}

impl<R: Read + Send + 'static> RecordSource<R> {
    /// Records read on a thread of their own.
    pub fn ahead(records: Records<R>) -> RecordSource<R> {
        let (full_tx, full) = sync_channel(IN_FLIGHT);
        let (empty, empty_rx) = channel();
        let started = std::thread::Builder::new()
            .name("replay-records".into())
            .spawn(move || {
                super::behind_the_engine();
                read_batches(records, &full_tx, &empty_rx)
            });
        // A system out of threads: the first read says so (the records went with the
        // closure the thread would have run).
        let failed = started.err().map(|e| {
            std::io::Error::other(format!("cannot start the thread reading the log: {e}"))
        });
        RecordSource::Ahead(ReadAhead {
            full,
            empty,
            batch: Vec::new(),
            next: 0,
            mid_line: false,
            ended: false,
            end_line: 0,
            failed,
        })
    }
}

/// The reading end of a read-ahead thread.
pub(crate) struct ReadAhead {
    full: Receiver<Message>,
    empty: Sender<Vec<Cells>>,
    /// The batch being handed out, up to `next`.
    batch: Vec<Cells>,
    next: usize,
    mid_line: bool,
    ended: bool,
    /// The line the log ended at.
    end_line: u64,
    /// Why the thread did not start.
    failed: Option<std::io::Error>,
}

impl ReadAhead {
    fn read(&mut self, cells: &mut Cells) -> csv::Result<bool> {
        if let Some(e) = self.failed.take() {
            self.ended = true;
            return Err(csv::Error::from(e));
        }
        while self.next == self.batch.len() {
            if self.ended {
                // As the records' reader leaves them at the end.
                cells.clear(self.end_line);
                return Ok(false);
            }
            // The emptied batch goes back to be read into (the thread may have ended: then
            // nobody needs it).
            let spent = std::mem::take(&mut self.batch);
            if !spent.is_empty() {
                let _ = self.empty.send(spent);
            }
            self.next = 0;
            match self.full.recv() {
                Ok(Message::Records(batch)) => self.batch = batch,
                Ok(Message::Failed(e)) => {
                    // The thread stops after an I/O error; the reader alone would go on
                    // reading after another kind (none is expected of flexible records).
                    self.ended = matches!(e.kind(), csv::ErrorKind::Io(_));
                    return Err(e);
                }
                Ok(Message::End { mid_line, line }) => {
                    self.mid_line = mid_line;
                    self.end_line = line;
                    self.ended = true;
                }
                Err(_) => {
                    self.ended = true;
                    return Err(csv::Error::from(std::io::Error::other(
                        "the thread reading the log stopped",
                    )));
                }
            }
        }
        // The record is swapped out: the one `cells` held goes back with the batch.
        std::mem::swap(cells, &mut self.batch[self.next]);
        self.next += 1;
        Ok(true)
    }
}

/// The thread: reads records into batches until the log ends, an I/O error, or the reader
/// is gone.
fn read_batches<R: Read>(
    mut records: Records<R>,
    full: &SyncSender<Message>,
    empty: &Receiver<Vec<Cells>>,
) {
    loop {
        // A batch the reader has emptied, else a new one (the first few).
        let mut batch = empty.try_recv().unwrap_or_default();
        let mut filled = 0;
        let mut failed = None;
        let mut ended = false;
        while filled < RECORDS {
            if filled == batch.len() {
                batch.push(Cells::default());
            }
            match records.read(&mut batch[filled]) {
                Ok(true) => {
                    filled += 1;
                    // What is read goes on before a read of the log that may wait: a log
                    // piped from a running nvidia-smi is replayed as it comes.
                    if !records.buffered() {
                        break;
                    }
                }
                Ok(false) => {
                    ended = true;
                    break;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let line = batch.get(filled).map_or(0, Cells::line);
        batch.truncate(filled);
        if filled > 0 && full.send(Message::Records(batch)).is_err() {
            return;
        }
        if let Some(e) = failed {
            let io = matches!(e.kind(), csv::ErrorKind::Io(_));
            if full.send(Message::Failed(e)).is_err() || io {
                return;
            }
        }
        if ended {
            let mid_line = records.ends_mid_line();
            let _ = full.send(Message::End { mid_line, line });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gives `text`, then fails.
    struct FailsAfter(std::io::Cursor<Vec<u8>>);

    impl Read for FailsAfter {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match self.0.read(buf)? {
                0 => Err(std::io::Error::other("disk gone")),
                n => Ok(n),
            }
        }
    }

    fn lines(source: &mut RecordSource<impl Read>) -> (Vec<u64>, Option<String>) {
        let mut cells = Cells::default();
        let mut read = Vec::new();
        loop {
            match source.read(&mut cells) {
                Ok(true) => read.push(cells.line()),
                Ok(false) => return (read, None),
                Err(e) => return (read, Some(e.to_string())),
            }
        }
    }

    #[test]
    fn records_across_batches_come_in_order_with_their_lines() {
        let text: String = (0..1000).map(|i| format!("{i},x\n")).collect();
        let mut ahead = RecordSource::ahead(Records::new(std::io::Cursor::new(text.clone())));
        let (read, error) = lines(&mut ahead);
        assert_eq!(read, (1..=1000).collect::<Vec<u64>>());
        assert_eq!(error, None);
        assert!(!ahead.ends_mid_line());
        let mut cut = RecordSource::ahead(Records::new(std::io::Cursor::new("a,b\nc,d")));
        assert_eq!(lines(&mut cut).0, [1, 2]);
        assert!(cut.ends_mid_line(), "the log ends inside its last line");
    }

    /// A pipe: each read gives the next chunk sent, waiting for it; the end when the
    /// sender is gone.
    struct Pipe(std::sync::mpsc::Receiver<Vec<u8>>);

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Ok(chunk) = self.0.recv() else {
                return Ok(0);
            };
            let n = chunk.len().min(buf.len());
            buf[..n].copy_from_slice(&chunk[..n]);
            Ok(n)
        }
    }

    #[test]
    fn records_of_a_log_still_being_written_come_before_its_end() {
        let (write, pipe) = channel();
        let (got, records) = channel();
        std::thread::spawn(move || {
            let mut ahead = RecordSource::ahead(Records::new(Pipe(pipe)));
            let mut cells = Cells::default();
            while let Ok(true) = ahead.read(&mut cells) {
                let _ = got.send(cells.line());
            }
        });
        let wait = std::time::Duration::from_secs(10);
        write.send(b"a,b\nc,d\n".to_vec()).unwrap();
        assert_eq!(records.recv_timeout(wait), Ok(1));
        assert_eq!(
            records.recv_timeout(wait),
            Ok(2),
            "without waiting for more of the log"
        );
        write.send(b"e,f\n".to_vec()).unwrap();
        assert_eq!(records.recv_timeout(wait), Ok(3));
    }

    #[test]
    fn an_io_error_comes_after_the_records_read_before_it_and_ends_the_log() {
        let text: String = (0..600).map(|i| format!("{i},x\n")).collect();
        let input = FailsAfter(std::io::Cursor::new(text.into_bytes()));
        let mut ahead = RecordSource::ahead(Records::new(input));
        let (read, error) = lines(&mut ahead);
        assert_eq!(read.len(), 600);
        assert!(error.is_some_and(|e| e.contains("disk gone")));
        let mut cells = Cells::default();
        assert!(
            matches!(ahead.read(&mut cells), Ok(false)),
            "nothing after the error"
        );
    }
}
