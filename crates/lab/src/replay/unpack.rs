//! What a recording's first bytes say it is, before a reader parses it: operators keep
//! rotated logs gzip-compressed (logrotate's `compress`), so gzip is read as it is; other
//! compressions and binary files are refused by name instead of failing later as "a log
//! with no header line".

use anyhow::Context as _;
use std::io::{Cursor, Read};

/// Bytes looked at to tell what the input is.
const SNIFF: u64 = 512;

/// Magic numbers of compressions we do not read, with the command that unpacks them.
const OTHER_COMPRESSIONS: [(&[u8], &str, &str); 4] = [
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -dc"),
    (b"\xfd7zXZ\x00", "xz", "xz -dc"),
    (b"BZh", "bzip2", "bzip2 -dc"),
    (b"\x04\x22\x4d\x18", "lz4", "lz4 -dc"),
];

/// The recording's text: `input` itself, or its gzip members decompressed. `origin` names
/// it in errors.
pub fn text_of(input: Box<dyn Read + Send>, origin: &str) -> anyhow::Result<Box<dyn Read + Send>> {
    let (head, input) = sniff(input).with_context(|| format!("cannot read {origin}"))?;
    if head.starts_with(b"\x1f\x8b") {
        // Several members (`cat a.gz b.gz`, or a log gzipped while it grew) are one text.
        let unpacked: Box<dyn Read + Send> = Box::new(flate2::read::MultiGzDecoder::new(input));
        let (head, unpacked) =
            sniff(unpacked).with_context(|| format!("cannot decompress {origin} (gzip)"))?;
        refuse_binary(&head, &format!("{origin} (decompressed)"))?;
        return Ok(unpacked);
    }
    for (magic, name, command) in OTHER_COMPRESSIONS {
        if head.starts_with(magic) {
            anyhow::bail!(
                "{origin} is compressed with {name}, which replay does not read: \
                 `{command} {origin} | gpu-sentinel replay -` (gzip is read as it is)"
            );
        }
    }
    refuse_binary(&head, origin)?;
    Ok(input)
}

/// The input's first bytes, and the input whole again (those bytes put back in front).
fn sniff(mut input: Box<dyn Read + Send>) -> std::io::Result<(Vec<u8>, Box<dyn Read + Send>)> {
    let mut head = Vec::with_capacity(SNIFF as usize);
    (&mut input).take(SNIFF).read_to_end(&mut head)?;
    let whole: Box<dyn Read + Send> = Box::new(Cursor::new(head.clone()).chain(input));
    Ok((head, whole))
}

/// An error naming `origin` when `head` is not text: a NUL byte, or bytes that are not
/// UTF-8 (a character cut at the end of `head` is not counted).
fn refuse_binary(head: &[u8], origin: &str) -> anyhow::Result<()> {
    let at = match (memchr::memchr(0, head), std::str::from_utf8(head)) {
        (Some(at), _) => Some(at),
        (None, Err(e)) if e.error_len().is_some() => Some(e.valid_up_to()),
        _ => None,
    };
    if let Some(at) = at {
        anyhow::bail!(
            "{origin} is not text (byte {at} is {:#04x}): not an nvidia-smi log or a JSONL \
             recording{}",
            head[at],
            if head.starts_with(b"PK\x03\x04") {
                " (it is a zip archive; unpack it first)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "timestamp, index, uuid, utilization.gpu [%]\n\
                       2026/11/30 10:00:00.000, 0, GPU-a, 50 %\n";

    fn read_all(input: Box<dyn Read + Send>) -> String {
        let mut text = String::new();
        let mut input = input;
        input.read_to_string(&mut text).expect("text");
        text
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).expect("gzip");
        encoder.finish().expect("gzip")
    }

    #[test]
    fn text_passes_whole_and_gzip_is_decompressed_across_members() {
        let plain = text_of(Box::new(Cursor::new(LOG.as_bytes().to_vec())), "log").expect("text");
        assert_eq!(read_all(plain), LOG);
        let (first, second) = LOG.split_at(30);
        let mut members = gzip(first.as_bytes());
        members.extend(gzip(second.as_bytes()));
        let unpacked = text_of(Box::new(Cursor::new(members)), "log.gz").expect("gzip");
        assert_eq!(read_all(unpacked), LOG);
    }

    #[test]
    fn a_long_log_reads_back_whole_past_the_sniffed_bytes() {
        let long: String = LOG.repeat(100);
        let read =
            read_all(text_of(Box::new(Cursor::new(gzip(long.as_bytes()))), "x.gz").expect("gzip"));
        assert_eq!(read, long);
    }

    #[test]
    fn binaries_and_other_compressions_are_named() {
        let err = |bytes: &[u8]| {
            text_of(Box::new(Cursor::new(bytes.to_vec())), "f")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(b"\x7fELF\x02\x01\x01\x00\x00").contains("f is not text (byte 7"));
        assert!(err(b"\x28\xb5\x2f\xfd\x00\x01").contains("zstd -dc f"));
        assert!(err(b"PK\x03\x04\x14\x00").contains("zip archive"));
        assert!(err(&gzip(b"\x00\x01binary")).contains("f (decompressed) is not text"));
        assert!(err(b"\x1f\x8bnot really gzip").contains("cannot decompress f (gzip)"));
        // A character cut at the end of the sniffed bytes is still text.
        let mut cut = "a".repeat(SNIFF as usize - 1).into_bytes();
        cut.extend("é".as_bytes());
        assert!(err(&cut).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_read_back_whole_or_refused_cleanly(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2000),
        ) {
            if let Ok(mut text) = text_of(Box::new(Cursor::new(bytes.clone())), "p") {
                let mut back = Vec::new();
                if text.read_to_end(&mut back).is_ok() && !bytes.starts_with(b"\x1f\x8b") {
                    proptest::prop_assert_eq!(back, bytes);
                }
            }
        }
    }
}
