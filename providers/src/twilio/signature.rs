//! `X-Twilio-Signature`: HMAC-SHA1 (key: the auth token) of the full URL Twilio requested
//! followed by every POST parameter as `name + value`, sorted by name (and value), Base64.
//!
//! The official validators accept the URL with and without the default port (`:443` for
//! https, `:80` for http), because Twilio's own signing is inconsistent there; so does
//! [`verify`]. JSON-body webhooks (`bodySHA256`) are not used by Messaging and not handled.

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;

use crate::webhook::constant_time_eq;

/// The signature Twilio sends for a form POST to `url` with `params`.
///
/// ```
/// use botmesh_providers::twilio::signature;
/// let params = [
///     ("CallSid", "CA1234567890ABCDE"), ("Caller", "+14158675309"), ("Digits", "1234"),
///     ("From", "+14158675309"), ("To", "+18005551212"),
/// ];
/// assert_eq!(
///     signature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", &params),
///     "RSOYDt4T1cUTdK1PDd93/VVr8B8=",
/// );
/// ```
pub fn signature<K: AsRef<str>, V: AsRef<str>>(
    auth_token: &str,
    url: &str,
    params: &[(K, V)],
) -> String {
    let mut sorted: Vec<(&str, &str)> = params
        .iter()
        .map(|(k, v)| (k.as_ref(), v.as_ref()))
        .collect();
    sorted.sort_unstable();
    let mut data = String::from(url);
    for (k, v) in sorted {
        data.push_str(k);
        data.push_str(v);
    }
    // HMAC accepts keys of any length, so this cannot fail; an empty signature never matches.
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(auth_token.as_bytes()) else {
        return String::new();
    };
    mac.update(data.as_bytes());
    botmesh::codec::encode_base64(&mac.finalize().into_bytes())
}

/// The URL with the default port added, or removed if it is there (`None` for another port).
fn port_variant(url: &str) -> Option<String> {
    let scheme_end = url.find("://")?;
    let default = match &url[..scheme_end] {
        "https" => ":443",
        "http" => ":80",
        _ => return None,
    };
    let start = scheme_end + 3;
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let authority = &url[start..end];
    let host_part = authority
        .rsplit_once(']')
        .map_or(authority, |(_, after)| after);
    if let Some(stripped) = authority.strip_suffix(default) {
        Some(format!("{}{stripped}{}", &url[..start], &url[end..]))
    } else if host_part.contains(':') {
        None
    } else {
        Some(format!(
            "{}{authority}{default}{}",
            &url[..start],
            &url[end..]
        ))
    }
}

/// Whether `header` is the signature of `url` and `params` (or of `url` with/without its
/// default port), compared in constant time.
pub fn verify<K: AsRef<str>, V: AsRef<str>>(
    auth_token: &str,
    url: &str,
    params: &[(K, V)],
    header: &str,
) -> bool {
    let header = header.trim().as_bytes();
    // No signature, or no key to check it with (any body is "signed" with the empty key).
    if header.is_empty() || auth_token.is_empty() {
        return false;
    }
    if constant_time_eq(signature(auth_token, url, params).as_bytes(), header) {
        return true;
    }
    port_variant(url)
        .is_some_and(|alt| constant_time_eq(signature(auth_token, &alt, params).as_bytes(), header))
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://mycompany.com/myapp.php?foo=1&bar=2";
    const PARAMS: [(&str, &str); 5] = [
        ("CallSid", "CA1234567890ABCDE"),
        ("Caller", "+14158675309"),
        ("Digits", "1234"),
        ("From", "+14158675309"),
        ("To", "+18005551212"),
    ];

    #[test]
    fn matches_the_documented_vectors() {
        assert_eq!(
            signature("12345", URL, &PARAMS),
            "RSOYDt4T1cUTdK1PDd93/VVr8B8="
        );
        assert_eq!(
            signature(
                "12345",
                "https://mycompany.com:443/myapp.php?foo=1&bar=2",
                &PARAMS
            ),
            "kvajT1Ptam85bY51eRf/AJRuM3w="
        );
        let repeated = [
            ("Sid", "CA123"),
            ("SidAccount", "AC123"),
            ("Digits", "5678"),
            ("Digits", "1234"),
        ];
        assert_eq!(
            signature("12345", URL, &repeated),
            "IK+Dwps556ElfBT0I3Rgjkr1wJU="
        );
    }

    #[test]
    fn accepts_the_url_with_or_without_the_default_port() {
        assert!(verify(
            "12345",
            URL,
            &PARAMS,
            "RSOYDt4T1cUTdK1PDd93/VVr8B8="
        ));
        assert!(verify(
            "12345",
            URL,
            &PARAMS,
            "kvajT1Ptam85bY51eRf/AJRuM3w="
        ));
        assert!(verify(
            "12345",
            "https://mycompany.com:443/myapp.php?foo=1&bar=2",
            &PARAMS,
            "RSOYDt4T1cUTdK1PDd93/VVr8B8="
        ));
        assert!(!verify(
            "12345",
            URL,
            &PARAMS,
            "kvajT1Ptam85bY51eRf/AJRuM3w"
        ));
        assert!(!verify(
            "54321",
            URL,
            &PARAMS,
            "RSOYDt4T1cUTdK1PDd93/VVr8B8="
        ));
        assert!(!verify(
            "12345",
            URL,
            &PARAMS[1..],
            "RSOYDt4T1cUTdK1PDd93/VVr8B8="
        ));
        assert!(!verify("12345", URL, &PARAMS, ""));
    }
}
