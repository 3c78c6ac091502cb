//! A tiny `multipart/form-data` reader for the fakes: text fields as strings, file fields as
//! `{"file_name": …, "len": …, "content_type": …}`.

use serde_json::{Map, Value, json};

/// Parses `body` with the boundary of `content_type`; `None` when it is not multipart.
pub fn parse(content_type: &str, body: &[u8]) -> Option<Map<String, Value>> {
    let boundary = content_type
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("boundary="))?
        .trim_matches('"');
    let delimiter = format!("--{boundary}");
    let mut out = Map::new();
    let mut rest = body;
    while let Some(start) = find(rest, delimiter.as_bytes()) {
        rest = &rest[start + delimiter.len()..];
        if rest.starts_with(b"--") {
            break;
        }
        let rest_trim = rest.strip_prefix(b"\r\n").unwrap_or(rest);
        let header_end = find(rest_trim, b"\r\n\r\n")?;
        let headers = String::from_utf8_lossy(&rest_trim[..header_end]).to_string();
        let content = &rest_trim[header_end + 4..];
        let end = find(content, format!("\r\n{delimiter}").as_bytes())?;
        let data = &content[..end];
        let name = attr(&headers, "name")?;
        match attr(&headers, "filename") {
            Some(file_name) => {
                let ct = headers.lines().find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-type:")
                        .map(|v| v.trim().to_owned())
                });
                out.insert(
                    name,
                    json!({ "file_name": file_name, "len": data.len(), "content_type": ct }),
                );
            }
            None => {
                out.insert(
                    name,
                    Value::String(String::from_utf8_lossy(data).into_owned()),
                );
            }
        }
        rest = &content[end + 2..];
    }
    Some(out)
}

fn attr(headers: &str, key: &str) -> Option<String> {
    let needle = format!("{key}=\"");
    let line = headers
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("content-disposition"))?;
    let mut search = line;
    loop {
        let i = search.find(&needle)?;
        // `name=` must not match the tail of `filename=`.
        if i > 0 && search.as_bytes()[i - 1].is_ascii_alphabetic() {
            search = &search[i + needle.len()..];
            continue;
        }
        let tail = &search[i + needle.len()..];
        return tail.find('"').map(|j| tail[..j].to_owned());
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
