//! Blocking HTTP for tests and tooling, no dependencies:
//!
//! - a minimal HTTP/1.0 client: one request, the whole answer ([`request`]), or its Server-Sent Events one by one as
//!   they arrive ([`open_events`]). HTTP/1.0 so that the body is neither chunked nor kept alive: the answer ends
//!   when the server closes.
//! - a scripted HTTP server on 127.0.0.1 ([`ScriptedServer`]): each connection gets the next scripted [`Reply`],
//!   whose body is sent in parts as they come, pausing on a [`Gate`] until the test opens it, so a test can prove
//!   that a client acts on the first part of a stream before the rest exists (no timing involved).
//!   [`chat_chunk`] and [`SSE_DONE`] script an OpenAI-compatible LLM that streams.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
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

/// A gate a scripted reply pauses on: what follows it is sent only once the test [`open`](Self::open)s it.
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    /// A closed gate.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens the gate for good: every reply waiting on it goes on.
    pub fn open(&self) {
        let (open, changed) = &*self.0;
        *open.lock().unwrap_or_else(PoisonError::into_inner) = true;
        changed.notify_all();
    }

    /// Waits until the gate is open, at most `limit` (a test that forgets to open it fails instead of hanging).
    fn wait(&self, limit: Duration) {
        let (open, changed) = &*self.0;
        let guard = open.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = changed.wait_timeout_while(guard, limit, |open| !*open);
    }
}

/// One part of a scripted body.
#[derive(Debug, Clone)]
enum Part {
    Bytes(Vec<u8>),
    Wait(Gate),
}

/// One scripted answer: a status, headers, and a body sent in parts as they come. Without a `content-length`
/// header (see [`json`](Self::json)) the body ends when the server closes the connection, so a reply that stops
/// early is a stream broken mid-way.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    parts: Vec<Part>,
}

impl Reply {
    /// A reply of `status` with no header and no body yet.
    #[must_use]
    pub fn new(status: u16) -> Self {
        Self { status, headers: Vec::new(), parts: Vec::new() }
    }

    /// A whole JSON body with its length.
    #[must_use]
    pub fn json(status: u16, body: &str) -> Self {
        Self::new(status)
            .header("content-type", "application/json")
            .header("content-length", &body.len().to_string())
            .send(body)
    }

    /// A `text/event-stream` reply whose events follow (`send`, `wait`); it ends when the server closes.
    #[must_use]
    pub fn event_stream() -> Self {
        Self::new(200).header("content-type", "text/event-stream").header("cache-control", "no-cache")
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Adds bytes to the body, sent at once (and flushed) when their turn comes.
    #[must_use]
    pub fn send(mut self, bytes: impl AsRef<[u8]>) -> Self {
        self.parts.push(Part::Bytes(bytes.as_ref().to_vec()));
        self
    }

    /// Pauses the body until `gate` is open (at most 60 s).
    #[must_use]
    pub fn wait(mut self, gate: &Gate) -> Self {
        self.parts.push(Part::Wait(gate.clone()));
        self
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

/// A real HTTP/1.1 server on 127.0.0.1 on threads of its own (no async runtime needed): each connection gets the
/// next reply of the script (the last one repeats) once its request has arrived whole, and every request (head and
/// body) is recorded. It stops accepting when dropped.
#[derive(Debug)]
pub struct ScriptedServer {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
    stopped: Arc<AtomicBool>,
}

impl ScriptedServer {
    /// Starts a server answering with `script`, in order.
    ///
    /// # Errors
    /// No loopback port to bind.
    ///
    /// # Panics
    /// On an empty script.
    pub fn start(script: Vec<Reply>) -> io::Result<Self> {
        assert!(!script.is_empty(), "a script needs at least one reply");
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(AtomicBool::new(false));
        let (seen, stop) = (Arc::clone(&requests), Arc::clone(&stopped));
        std::thread::spawn(move || {
            for (n, conn) in listener.incoming().enumerate() {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let reply = script[n.min(script.len() - 1)].clone();
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || serve_one(conn, &reply, &seen));
            }
        });
        Ok(Self { url, requests, stopped })
    }

    /// `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request received so far (head and body), in order of arrival.
    #[must_use]
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::Release);
        // Wakes the accept loop so it sees the flag.
        if let Some((host, port)) = parse_http_url(&self.url) {
            let _ = TcpStream::connect((host.as_str(), port));
        }
    }
}

/// Reads one request whole (head, then `Content-Length` bytes of body), records it, and sends `reply`.
fn serve_one(mut conn: TcpStream, reply: &Reply, seen: &Mutex<Vec<String>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 4096];
    loop {
        let Ok(k) = conn.read(&mut chunk) else { return };
        if k == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..k]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim() == "content-length")
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            break;
        }
    }
    seen.lock().unwrap_or_else(PoisonError::into_inner).push(String::from_utf8_lossy(&buf).into_owned());
    let mut head = format!("HTTP/1.1 {} Scripted\r\nconnection: close\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if conn.write_all(head.as_bytes()).and_then(|()| conn.flush()).is_err() {
        return;
    }
    for part in &reply.parts {
        match part {
            Part::Bytes(bytes) => {
                if conn.write_all(bytes).and_then(|()| conn.flush()).is_err() {
                    return;
                }
            }
            Part::Wait(gate) => gate.wait(Duration::from_secs(60)),
        }
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

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
