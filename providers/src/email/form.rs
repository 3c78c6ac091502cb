//! The bodies of the inbound-parse posts: `application/x-www-form-urlencoded` (Mailgun without
//! attachments) and `multipart/form-data` (Mailgun with attachments, SendGrid always). A
//! multipart body is a MIME body, so `mail-parser` reads it (the parts' `Content-Disposition`
//! names the field and the file), rather than a parser written here.

use mail_parser::{MessageParser, MimeHeaders, PartType};

use super::attachments::Attachment;
use crate::webhook::{Refused, WebhookRequest};

/// A file field.
#[derive(Debug, Clone)]
pub(crate) struct FormFile {
    /// The field's name (`attachment-1`, `attachment1`).
    pub(crate) field: String,
    /// The file.
    pub(crate) attachment: Attachment,
}

/// A decoded form: text fields and file fields, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Form {
    /// Text fields.
    pub(crate) fields: Vec<(String, String)>,
    /// File fields.
    pub(crate) files: Vec<FormFile>,
}

impl Form {
    /// A text field's value.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The files of the fields whose names start with `prefix`, in order.
    pub(crate) fn files_named(&self, prefix: &str) -> Vec<Attachment> {
        let files = self.files.iter().filter(|f| f.field.starts_with(prefix));
        files.map(|f| f.attachment.clone()).collect()
    }

    /// A text field's value, when present and not blank.
    pub(crate) fn value(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.trim().is_empty())
    }
}

/// The form of a webhook request, by its `Content-Type`.
pub(crate) fn of_request(request: &WebhookRequest) -> Result<Form, Refused> {
    let ct = request.header("content-type").unwrap_or_default();
    parse(ct, &request.body).map_err(Refused::Malformed)
}

/// Decodes `body` by its `content_type`.
pub(crate) fn parse(content_type: &str, body: &[u8]) -> Result<Form, String> {
    let ct = content_type.to_ascii_lowercase();
    if ct.starts_with("application/x-www-form-urlencoded") {
        let fields: Vec<(String, String)> =
            serde_urlencoded::from_bytes(body).map_err(|e| format!("not a form: {e}"))?;
        return Ok(Form {
            fields,
            files: Vec::new(),
        });
    }
    if !ct.starts_with("multipart/form-data") {
        return Err(format!("unexpected content type {content_type:?}"));
    }
    let mut raw = format!("Content-Type: {content_type}\r\n\r\n").into_bytes();
    raw.extend_from_slice(body);
    let msg = MessageParser::default()
        .parse(&raw)
        .ok_or("the multipart body does not parse")?;
    let mut form = Form::default();
    for part in msg.parts.iter().skip(1) {
        if matches!(part.body, PartType::Multipart(_)) {
            continue;
        }
        let Some(disposition) = part.content_disposition() else {
            continue;
        };
        let Some(name) = disposition.attribute("name") else {
            continue;
        };
        match disposition.attribute("filename") {
            Some(file_name) => {
                form.files.push(FormFile {
                    field: name.to_owned(),
                    attachment: Attachment {
                        file_name: Some(file_name.to_owned()).filter(|f| !f.is_empty()),
                        content_type: super::inbound::type_of(part, "application/octet-stream"),
                        bytes: part.contents().to_vec(),
                    },
                });
            }
            None => form.fields.push((
                name.to_owned(),
                String::from_utf8_lossy(part.contents()).into_owned(),
            )),
        }
    }
    Ok(form)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn multipart_fields_and_files() {
        let body = "--XyZ\r\n\
Content-Disposition: form-data; name=\"subject\"\r\n\
\r\n\
Héllo\r\n\
--XyZ\r\n\
Content-Disposition: form-data; name=\"attachment1\"; filename=\"a.bin\"\r\n\
Content-Type: application/octet-stream\r\n\
\r\n\
\x00\x01binary\r\n\
--XyZ--\r\n";
        let form = parse("multipart/form-data; boundary=XyZ", body.as_bytes()).expect("form");
        assert_eq!(form.get("subject"), Some("Héllo"));
        assert_eq!(form.files.len(), 1);
        assert_eq!(form.files[0].field, "attachment1");
        assert_eq!(form.files[0].attachment.bytes, b"\x00\x01binary");
        let form = parse("application/x-www-form-urlencoded", b"a=1&b=x+y").expect("form");
        assert_eq!(form.get("b"), Some("x y"));
    }
}
