//! A minimal blocking HTTP/1.0 client for tests and tooling: one request, the whole answer, no dependencies.
//! HTTP/1.0 so that the body is neither chunked nor kept alive: the answer ends when the server closes.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// An answer: status, headers (names lower-cased) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first header of that name (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// `method path` on `url` (`http://HOST:PORT`) with extra headers and an optional JSON body.
///
/// # Errors
/// An unusable URL, a refused connection, a timeout (2 s to connect, 60 s to read), or an answer that is not HTTP.
pub fn request(
    method: &str,
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
    json_body: Option<&str>,
) -> io::Result<Response> {
    request_bytes(method, url, path, headers, json_body.map(str::as_bytes))
}

/// [`request`] with a body of any bytes (sent as `application/json`).
///
/// # Errors
/// As [`request`].
pub fn request_bytes(
    method: &str,
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<Response> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidInput, format!("not an http://HOST:PORT URL: {url}"));
    let (host, port) = parse_http_url(url).ok_or_else(invalid)?;
    let address = (host.as_str(), port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::other(format!("{host} resolves to no address")))?;
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot connect to {url}: {e}")))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    stream.set_write_timeout(Some(Duration::from_secs(60)))?;
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: {host}:{port}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    // A server may answer (413) and close before reading a large body: a failed write still has an answer.
    let _ = stream.write_all(&bytes);
    let mut response = Vec::new();
    stream.take(64 << 20).read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response);
    parse_response(&text).ok_or_else(|| io::Error::other(format!("not an HTTP response from {url}{path}: {text:?}")))
}

/// Host and port of an `http://HOST:PORT` URL (no path).
#[must_use]
pub fn parse_http_url(url: &str) -> Option<(String, u16)> {
    let authority = url.strip_prefix("http://")?.trim_end_matches('/');
    let (host, port) = authority.rsplit_once(':')?;
    if host.is_empty() || authority.contains('/') {
        return None;
    }
    Some((host.to_owned(), port.parse().ok().filter(|p| *p != 0)?))
}

/// Status, headers and body of an HTTP/1.x response.
fn parse_response(response: &str) -> Option<Response> {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response, ""));
    let mut lines = head.lines();
    let mut fields = lines.next()?.split_whitespace();
    if !fields.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let status = fields.next().filter(|c| c.len() == 3)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some(Response { status, headers, body: body.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_responses_parse_strictly() {
        assert_eq!(parse_http_url("http://127.0.0.1:6333"), Some(("127.0.0.1".to_owned(), 6333)));
        assert_eq!(parse_http_url("http://127.0.0.1:6333/"), Some(("127.0.0.1".to_owned(), 6333)));
        for bad in ["https://h:1", "http://h", "http://h:0", "http://:1", "http://h:1/x"] {
            assert_eq!(parse_http_url(bad), None, "{bad}");
        }
        let r = parse_response("HTTP/1.0 200 OK\r\nA: b\r\n\r\nall shards are ready").unwrap();
        assert_eq!((r.status, r.header("a"), r.body.as_str()), (200, Some("b"), "all shards are ready"));
        assert_eq!(parse_response("HTTP/1.1 503 Service Unavailable\r\n\r\n").map(|r| r.status), Some(503));
        assert_eq!(parse_response("SSH-2.0-OpenSSH"), None);
    }
}
