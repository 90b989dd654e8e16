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
    send("HTTP/1.0", method, url, path, headers, body)
}

/// [`request`] as HTTP/1.1 with `Connection: close`, for servers that do not speak HTTP/1.0 (ChromeDriver);
/// a chunked body is decoded.
///
/// # Errors
/// As [`request`].
pub fn request_http11(
    method: &str,
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
    json_body: Option<&str>,
) -> io::Result<Response> {
    let mut all = headers.to_vec();
    all.push(("Connection", "close"));
    send("HTTP/1.1", method, url, path, &all, json_body.map(str::as_bytes))
}

fn send(
    version: &str,
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
    let mut head = format!("{method} {path} {version}\r\nHost: {host}:{port}\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()));
    } else if method == "POST" || method == "PUT" {
        head.push_str("Content-Length: 0\r\n");
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    // A server may answer (413) and close before reading a large body: a failed write still has an answer.
    let _ = stream.write_all(&bytes);
    let response = read_response(stream.take(64 << 20))?;
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

/// The response's bytes: up to the end of the stream, or as soon as a `Content-Length` body is complete (some
/// servers keep the connection open after answering).
fn read_response(mut stream: impl Read) -> io::Result<Vec<u8>> {
    let mut response = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(response);
        }
        response.extend_from_slice(&buf[..n]);
        let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim() == "content-length")
            .and_then(|(_, v)| v.trim().parse::<usize>().ok());
        if length.is_some_and(|len| response.len() >= end + 4 + len) {
            return Ok(response);
        }
    }
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
    let mut response = Response { status, headers, body: body.to_owned() };
    if response.header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        response.body = dechunk(body)?;
    }
    Some(response)
}

/// A chunked body's data (`SIZE\r\nDATA\r\n` … `0\r\n\r\n`).
fn dechunk(mut rest: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
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
        let r = parse_response(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n6\r\npedia \r\n0\r\n\r\n",
        );
        assert_eq!(r.unwrap().body, "Wikipedia ");
    }
}
