//! The on-disk format of [`FileDurability`](super::FileDurability): the snapshot and the append
//! log, both made of checksummed JSON lines.
//!
//! Every line is `<crc32 of the JSON, 8 hex digits> <JSON>\n`. A value that is valid UTF-8 is
//! stored as a JSON string, any other value as `{"hex": "…"}`.
//!
//! | file | lines |
//! | --- | --- |
//! | snapshot `<path>` | header `{"format":"botmesh-durable-file","version":1,"log_seq":N,"last_version":V}`, one line per entry, then `{"end":<entries>}` |
//! | log `<path>.log` | header `{"format":"botmesh-durable-log","version":1}`, then one line per committed write request `{"seq":N,"scope":…,"ops":[{"op":"put",…},{"op":"del","key":…}]}` |
//!
//! How reading judges what it finds:
//!
//! | found | verdict |
//! | --- | --- |
//! | snapshot whose first line is not our header | [`FileError::NotADurableFile`] |
//! | snapshot with a bad line, no end line, a wrong count or bytes after the end | [`FileError::SnapshotCorrupt`] |
//! | log whose first line is not our header (and is not a torn prefix of it) | [`FileError::NotADurableFile`] |
//! | log whose last line has no newline, or is the only bad line at the end | torn: cut there, the rest replayed |
//! | log with a bad line (checksum, JSON, sequence) followed by more lines | [`FileError::AppendLogCorrupt`] with line and byte offset |
//!
//! This module only encodes and parses bytes: it opens no file and decides nothing about
//! replay (see `writer`).

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::FileError;

/// The snapshot's format marker.
pub(crate) const SNAPSHOT_FORMAT: &str = "botmesh-durable-file";
/// The log's format marker.
pub(crate) const LOG_FORMAT: &str = "botmesh-durable-log";
/// The format version this build writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32 (IEEE), as in zip and PNG.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in bytes {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

/// Serializes `value` as one checksummed line, newline included.
pub(crate) fn encode_line<T: Serialize>(value: &T, out: &mut Vec<u8>) -> serde_json::Result<()> {
    let json = serde_json::to_vec(value)?;
    out.extend_from_slice(format!("{:08x} ", crc32(&json)).as_bytes());
    out.extend_from_slice(&json);
    out.push(b'\n');
    Ok(())
}

/// Parses one line (without its newline), checking its checksum.
pub(crate) fn decode_line<T: DeserializeOwned>(line: &[u8]) -> Result<T, String> {
    if line.len() < 10 || line[8] != b' ' {
        return Err("not a checksummed line".into());
    }
    let crc = std::str::from_utf8(&line[..8])
        .ok()
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or("bad checksum field")?;
    let json = &line[9..];
    if crc32(json) != crc {
        return Err("checksum mismatch".into());
    }
    serde_json::from_slice(json).map_err(|e| format!("bad JSON: {e}"))
}

/// Serde for entry values: a string when they are UTF-8, `{"hex": …}` otherwise.
mod value_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr<'a> {
        Text(std::borrow::Cow<'a, str>),
        Hex { hex: String },
    }

    pub(crate) fn serialize<S: Serializer>(value: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(value) {
            Ok(text) => Repr::Text(text.into()).serialize(s),
            Err(_) => Repr::Hex {
                hex: value.iter().map(|b| format!("{b:02x}")).collect(),
            }
            .serialize(s),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Text(text) => Ok(text.into_owned().into_bytes()),
            Repr::Hex { hex } => {
                let digits = hex.as_bytes();
                if digits.len() % 2 != 0 {
                    return Err(serde::de::Error::custom("odd hex length"));
                }
                digits
                    .chunks(2)
                    .map(|pair| {
                        std::str::from_utf8(pair)
                            .ok()
                            .and_then(|p| u8::from_str_radix(p, 16).ok())
                            .ok_or_else(|| serde::de::Error::custom("bad hex digit"))
                    })
                    .collect()
            }
        }
    }
}

/// The first line of a snapshot.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SnapshotHeader {
    pub(crate) format: String,
    pub(crate) version: u32,
    /// The last log sequence folded into this snapshot.
    pub(crate) log_seq: u64,
    /// The highest version ever given (versions are never reused).
    pub(crate) last_version: u64,
}

/// One stored entry (a snapshot line, or a `put` of the log).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredEntry {
    pub(crate) scope: String,
    pub(crate) key: String,
    pub(crate) version: u64,
    #[serde(with = "value_bytes")]
    pub(crate) value: Vec<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) idx1: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) idx2: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct SnapshotEnd {
    end: u64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SnapshotLine {
    End(SnapshotEnd),
    Entry(StoredEntry),
}

/// The first line of a log.
#[derive(Debug, Serialize, Deserialize)]
struct LogHeader {
    format: String,
    version: u32,
}

/// One change of a committed write, as logged and replayed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub(crate) enum Change {
    /// The key now holds this entry.
    Put {
        key: String,
        version: u64,
        #[serde(with = "value_bytes")]
        value: Vec<u8>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idx1: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        idx2: Option<String>,
    },
    /// The key was removed.
    Del { key: String },
}

/// One log line: the changes of one write request, in one scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LogLine {
    pub(crate) seq: u64,
    pub(crate) scope: String,
    pub(crate) ops: Vec<Change>,
}

/// A snapshot read back.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) log_seq: u64,
    pub(crate) last_version: u64,
    pub(crate) entries: Vec<StoredEntry>,
}

/// Encodes a whole snapshot.
pub(crate) fn encode_snapshot<'a>(
    log_seq: u64,
    last_version: u64,
    entries: impl Iterator<Item = StoredEntry> + 'a,
) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    let header = SnapshotHeader {
        format: SNAPSHOT_FORMAT.into(),
        version: FORMAT_VERSION,
        log_seq,
        last_version,
    };
    encode_line(&header, &mut out)?;
    let mut count = 0u64;
    for entry in entries {
        encode_line(&entry, &mut out)?;
        count += 1;
    }
    encode_line(&SnapshotEnd { end: count }, &mut out)?;
    Ok(out)
}

/// The exact bytes of a log header line.
pub(crate) fn log_header() -> Vec<u8> {
    let mut out = Vec::new();
    let header = LogHeader {
        format: LOG_FORMAT.into(),
        version: FORMAT_VERSION,
    };
    // Serializing two plain fields cannot fail.
    let _ = encode_line(&header, &mut out);
    out
}

/// Whether the bytes start like one of our lines with the given format marker.
fn looks_like(first_line: &[u8], format: &str) -> bool {
    let marker = format!("{{\"format\":\"{format}\"");
    first_line.len() > 9 && first_line[9..].starts_with(marker.as_bytes())
}

/// Parses a snapshot file's bytes.
pub(crate) fn parse_snapshot(bytes: &[u8], file: &Path) -> Result<Snapshot, FileError> {
    let corrupt = |reason: String| FileError::SnapshotCorrupt {
        file: file.to_path_buf(),
        reason,
    };
    let mut lines = bytes.split_inclusive(|&b| b == b'\n');
    let first = lines.next().unwrap_or_default();
    if !looks_like(first, SNAPSHOT_FORMAT) {
        return Err(FileError::NotADurableFile {
            file: file.to_path_buf(),
        });
    }
    let header: SnapshotHeader = match first.strip_suffix(b"\n") {
        Some(line) => decode_line(line).map_err(|e| corrupt(format!("header: {e}")))?,
        None => return Err(corrupt("truncated in its header".into())),
    };
    if header.version > FORMAT_VERSION {
        return Err(corrupt(format!(
            "format version {} is newer than this build's {FORMAT_VERSION}",
            header.version
        )));
    }
    let mut entries = Vec::new();
    let mut ended = false;
    for (n, raw) in lines.enumerate() {
        let line_no = n + 2;
        if ended {
            return Err(corrupt(format!(
                "bytes after the end line (line {line_no})"
            )));
        }
        let Some(line) = raw.strip_suffix(b"\n") else {
            return Err(corrupt(format!("truncated at line {line_no}")));
        };
        match decode_line::<SnapshotLine>(line) {
            Ok(SnapshotLine::Entry(entry)) => entries.push(entry),
            Ok(SnapshotLine::End(SnapshotEnd { end })) => {
                if end != entries.len() as u64 {
                    return Err(corrupt(format!(
                        "end line counts {end} entries, found {}",
                        entries.len()
                    )));
                }
                ended = true;
            }
            Err(e) => return Err(corrupt(format!("line {line_no}: {e}"))),
        }
    }
    if !ended {
        return Err(corrupt("truncated: no end line".into()));
    }
    Ok(Snapshot {
        log_seq: header.log_seq,
        last_version: header.last_version,
        entries,
    })
}

/// A log read back.
#[derive(Debug, Default)]
pub(crate) struct ParsedLog {
    /// The good lines, in order.
    pub(crate) lines: Vec<LogLine>,
    /// The length of the good prefix (header and good lines).
    pub(crate) valid_len: u64,
    /// Whether a complete header was found.
    pub(crate) has_header: bool,
    /// Where a torn tail starts (`valid_len`), if there is one.
    pub(crate) torn: bool,
}

/// Parses a log file's bytes.
pub(crate) fn parse_log(bytes: &[u8], file: &Path) -> Result<ParsedLog, FileError> {
    let mut parsed = ParsedLog::default();
    if bytes.is_empty() {
        return Ok(parsed);
    }
    let header = log_header();
    if !bytes.starts_with(&header) {
        if header.starts_with(bytes) {
            // A crash while the header itself was written.
            parsed.torn = true;
            return Ok(parsed);
        }
        return Err(FileError::NotADurableFile {
            file: file.to_path_buf(),
        });
    }
    parsed.has_header = true;
    let mut offset = header.len();
    parsed.valid_len = offset as u64;
    let body = &bytes[offset..];
    let raws: Vec<&[u8]> = body.split_inclusive(|&b| b == b'\n').collect();
    let mut last_seq = 0u64;
    for (n, raw) in raws.iter().enumerate() {
        let is_last = n + 1 == raws.len();
        let line_no = n as u64 + 2;
        let verdict = match raw.strip_suffix(b"\n") {
            None => Err("no trailing newline".to_owned()),
            Some(line) => decode_line::<LogLine>(line).and_then(|l| {
                if l.seq <= last_seq {
                    Err(format!("sequence {} does not follow {last_seq}", l.seq))
                } else {
                    Ok(l)
                }
            }),
        };
        match verdict {
            Ok(line) => {
                last_seq = line.seq;
                parsed.lines.push(line);
                offset += raw.len();
                parsed.valid_len = offset as u64;
            }
            Err(_) if is_last => {
                parsed.torn = true;
                break;
            }
            Err(reason) => {
                return Err(FileError::AppendLogCorrupt {
                    file: file.to_path_buf(),
                    line: line_no,
                    byte_offset: offset as u64,
                    reason,
                });
            }
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn values_round_trip_as_text_or_hex() {
        for value in [b"{\"a\":1}".to_vec(), vec![0, 159, 146, 150]] {
            let entry = StoredEntry {
                scope: "s".into(),
                key: "k".into(),
                version: 1,
                value,
                idx1: None,
                idx2: Some("x".into()),
            };
            let mut line = Vec::new();
            encode_line(&entry, &mut line).ok();
            let back: Result<StoredEntry, _> = decode_line(&line[..line.len() - 1]);
            assert_eq!(back, Ok(entry));
        }
    }
}
