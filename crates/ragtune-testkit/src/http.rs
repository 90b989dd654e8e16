//! HTTP for tests and tooling, no dependencies:
//!
//! - a minimal blocking HTTP/1.0 client: one request, the whole answer ([`request`]), or its Server-Sent Events one
//!   by one as they arrive ([`open_events`]). HTTP/1.0 so that the body is neither chunked nor kept alive: the
//!   answer ends when the server closes.
//! - the scripted HTTP server every test of the workspace uses ([`ScriptedServer`], [`serve`]): a real server on
//!   127.0.0.1 whose answers a test scripts per request ([`Reply`]: status, headers, raw body bytes, a delay, a
//!   truncated or huge body, a stream that pauses on a [`Gate`] until the test opens it), recording every
//!   [`Request`] with its arrival time. [`chat_chunk`] and [`SSE_DONE`] script an OpenAI-compatible LLM that
//!   streams.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

mod scripted;

pub use scripted::{Gate, Reply, Request, ScriptedServer, closed_port, serve};

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
    let stream = connect_and_send(version, method, url, path, headers, body)?;
    let response = read_response(stream.take(64 << 20))?;
    let text = String::from_utf8_lossy(&response);
    parse_response(&text).ok_or_else(|| io::Error::other(format!("not an HTTP response from {url}{path}: {text:?}")))
}

/// Connects to `url`, sends the request, and returns the connection to read the answer from.
fn connect_and_send(
    version: &str,
    method: &str,
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<TcpStream> {
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
    Ok(stream)
}

/// One Server-Sent Event: its `event:` name (`message` when it has none) and its `data:` lines joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub event: String,
    pub data: String,
}

/// An answer whose body is read as Server-Sent Events, one at a time, as the server sends them.
#[derive(Debug)]
pub struct Events {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
}

impl Events {
    /// The first header of that name (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The next event, waiting for it (at most the read timeout, 60 s); `None` when the server closed the stream.
    /// Comments (`: …`) and fields other than `event` and `data` are skipped.
    ///
    /// # Errors
    /// A timeout or a broken connection.
    pub fn next_event(&mut self) -> io::Result<Option<Event>> {
        let (mut event, mut data, mut any) = (String::new(), Vec::<String>::new(), false);
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Ok(any.then(|| Event { event: Self::name(event), data: data.join("\n") }));
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if any {
                    return Ok(Some(Event { event: Self::name(event), data: data.join("\n") }));
                }
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => event = value.to_owned(),
                "data" => data.push(value.to_owned()),
                _ => continue,
            }
            any = true;
        }
    }

    /// Every event left, until the server closes the stream.
    ///
    /// # Errors
    /// As [`next_event`](Self::next_event).
    pub fn rest(&mut self) -> io::Result<Vec<Event>> {
        let mut out = Vec::new();
        while let Some(e) = self.next_event()? {
            out.push(e);
        }
        Ok(out)
    }

    fn name(event: String) -> String {
        if event.is_empty() { "message".to_owned() } else { event }
    }
}

/// Sends a request (HTTP/1.0, as [`request`]) and returns as soon as the answer's head has arrived, so its
/// Server-Sent Events can be read one by one while the server is still sending ([`Events::next_event`]).
///
/// # Errors
/// As [`request`], and a head that is not HTTP.
pub fn open_events(
    method: &str,
    url: &str,
    path: &str,
    headers: &[(&str, &str)],
    json_body: Option<&str>,
) -> io::Result<Events> {
    let stream = connect_and_send("HTTP/1.0", method, url, path, headers, json_body.map(str::as_bytes))?;
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
    }
    let parsed = parse_response(&format!("{head}\r\n"))
        .ok_or_else(|| io::Error::other(format!("not an HTTP response from {url}{path}: {head:?}")))?;
    Ok(Events { status: parsed.status, headers: parsed.headers, reader })
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
        let Some((end, length)) = message_head(&response) else { continue };
        if length.is_some_and(|len| response.len() >= end + 4 + len) {
            return Ok(response);
        }
    }
}

/// Where an HTTP/1.x message's head ends (the index of its blank line) and its `Content-Length`, once `buf` holds
/// the whole head; `None` before. The one reading of a message's framing, for the client and the scripted server.
fn message_head(buf: &[u8]) -> Option<(usize, Option<usize>)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "content-length")
        .and_then(|(_, v)| v.trim().parse::<usize>().ok());
    Some((end, length))
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

/// One `data:` event of an OpenAI-compatible streamed chat completion (`chat.completion.chunk`) adding `content`,
/// with `finish_reason` when given (`stop`, `length`).
#[must_use]
pub fn chat_chunk(content: &str, finish_reason: Option<&str>) -> String {
    let chunk = serde_json::json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "model": "scripted",
        "choices": [{ "index": 0, "delta": { "content": content }, "finish_reason": finish_reason }]
    });
    format!("data: {chunk}\n\n")
}

/// The event that ends an OpenAI-compatible stream.
pub const SSE_DONE: &str = "data: [DONE]\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripted_stream_pauses_at_its_gate_and_events_are_read_as_they_arrive() {
        let gate = Gate::new();
        let server = ScriptedServer::start(vec![
            Reply::event_stream()
                .send(": a comment\n\nevent: token\ndata: one\n\n")
                .wait(&gate)
                .send("data: two\ndata: lines\n\n"),
            Reply::json(404, "{}"),
        ])
        .unwrap();
        let mut events = open_events("POST", server.url(), "/x", &[], Some("{\"q\": 1}")).unwrap();
        assert_eq!(events.status, 200);
        assert_eq!(events.header("content-type"), Some("text/event-stream"));
        // The first event arrives while the rest is held back by the gate.
        let first = events.next_event().unwrap().unwrap();
        assert_eq!((first.event.as_str(), first.data.as_str()), ("token", "one"));
        gate.open();
        let rest = events.rest().unwrap();
        assert_eq!(rest, [Event { event: "message".into(), data: "two\nlines".into() }]);
        let requests = server.requests();
        assert!(requests[0].starts_with("POST /x HTTP/1.0") && requests[0].ends_with("{\"q\": 1}"), "{requests:?}");
        // The last reply repeats.
        assert_eq!(request("GET", server.url(), "/", &[], None).unwrap().status, 404);
        assert_eq!(request("GET", server.url(), "/", &[], None).unwrap().body, "{}");
        assert!(chat_chunk("a\"b", Some("stop")).starts_with("data: {") && chat_chunk("", None).ends_with("\n\n"));
    }

    #[test]
    fn a_handler_sees_each_request_parsed_with_its_number() {
        let server = serve(|request, n| match (request.target.as_str(), n) {
            ("/slow", _) => Reply::json_value(200, &serde_json::json!({"n": n})).delayed(Duration::from_millis(50)),
            ("/cut", _) => Reply::raw(200, "application/json", "{\"a\": ").truncated(10),
            ("/big", _) => Reply::new(200).send_repeated("ab", 3).hold(Duration::from_millis(10)),
            _ => Reply::status(418).with_status(503).header("retry-after", "1"),
        });
        let started = std::time::Instant::now();
        let slow = request("POST", server.url(), "/slow", &[("X-Key", "k")], Some("{\"q\": [1]}")).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(50), "the reply waited its delay");
        assert_eq!((slow.status, slow.json()["n"].as_u64()), (200, Some(0)));
        let other = request("GET", server.url(), "/x?y=1", &[], None).unwrap();
        assert_eq!((other.status, other.header("retry-after"), other.body.as_str()), (503, Some("1"), "status 418"));
        assert_eq!(request("GET", server.url(), "/big", &[], None).unwrap().body, "ababab");
        // Ten announced bytes never come: the client reads what there is until the server closes.
        let cut = request("GET", server.url(), "/cut", &[], None).unwrap();
        assert_eq!((cut.header("content-length"), cut.body.as_str()), (Some("16"), "{\"a\": "));
        let received = server.received();
        assert_eq!(server.count(), 4);
        assert_eq!((received[0].method.as_str(), received[0].target.as_str()), ("POST", "/slow"));
        assert_eq!((received[0].header("x-key"), received[0].json()["q"][0].as_u64()), (Some("k"), Some(1)));
        assert_eq!((received[1].target.as_str(), received[1].body.as_str()), ("/x?y=1", ""));
        assert!(received[0].at <= received[1].at);
        assert_eq!(server.requests()[0], received[0].raw);
        assert!(received[0].raw.starts_with("POST /slow HTTP/1.0\r\n") && received[0].raw.ends_with("[1]}"));
        // Nothing listens on a closed port.
        assert!(request("GET", &closed_port(), "/", &[], None).is_err());
    }

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
