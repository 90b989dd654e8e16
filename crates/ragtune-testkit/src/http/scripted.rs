//! The one scripted HTTP server of the workspace's tests: a real HTTP/1.1 server on 127.0.0.1, on threads of its
//! own (so it needs no async runtime and works under any), whose every answer the test scripts.
//!
//! - [`serve`] answers each request with `handler(&request, n)`, `n` counting requests from 0;
//!   [`ScriptedServer::start`] answers with a fixed script (the `n`-th reply, the last one repeating).
//! - A [`Reply`] sets the status, the headers and a body sent in parts as they come: raw bytes (invalid UTF-8 and
//!   truncated bodies included), a part repeated many times (a huge body without holding it), a pause on a
//!   [`Gate`] the test opens (a stream whose rest does not exist yet, no timing involved), a hold before closing,
//!   and a delay before the answer starts.
//! - Every request is recorded whole ([`Request`]: method, target, headers, body, raw text, arrival time).
//!
//! Each connection carries one request and is closed after its answer (`connection: close`). The server stops
//! accepting when dropped.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::parse_http_url;

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
    /// Bytes sent (and flushed) at once.
    Bytes(Vec<u8>),
    /// The same bytes sent this many times, stopping when the client hangs up.
    Repeat(Vec<u8>, usize),
    /// A pause until the gate opens (at most 60 s).
    Wait(Gate),
    /// A pause of this long, the connection held open.
    Hold(Duration),
}

/// One scripted answer: a status, headers, and a body sent in parts as they come, after an optional delay.
///
/// Headers are sent as given: the whole-body constructors ([`json`](Self::json), [`json_value`](Self::json_value), [`raw`](Self::raw),
/// [`status`](Self::status)) announce their length; without a `content-length` header (see
/// [`event_stream`](Self::event_stream)) the body ends when the server closes the connection, so a reply that stops
/// early is a stream broken mid-way.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    parts: Vec<Part>,
    delay: Duration,
}

impl Reply {
    /// A reply of `status` with no header and no body yet.
    #[must_use]
    pub fn new(status: u16) -> Self {
        Self { status, headers: Vec::new(), parts: Vec::new(), delay: Duration::ZERO }
    }

    /// A whole JSON body with its length.
    #[must_use]
    pub fn json(status: u16, body: &str) -> Self {
        Self::raw(status, "application/json", body)
    }

    /// A whole JSON body, serialised from `value`, with its length.
    #[must_use]
    pub fn json_value(status: u16, value: &serde_json::Value) -> Self {
        Self::json(status, &value.to_string())
    }

    /// A whole body of any bytes (invalid UTF-8 included) with its content type and length.
    #[must_use]
    pub fn raw(status: u16, content_type: &str, body: impl AsRef<[u8]>) -> Self {
        let body = body.as_ref();
        Self::new(status)
            .header("content-type", content_type)
            .header("content-length", &body.len().to_string())
            .send(body)
    }

    /// A `text/plain` reply of `status` whose body says `status N`.
    #[must_use]
    pub fn status(status: u16) -> Self {
        Self::raw(status, "text/plain", format!("status {status}"))
    }

    /// A `text/event-stream` reply whose events follow (`send`, `wait`); it ends when the server closes.
    #[must_use]
    pub fn event_stream() -> Self {
        Self::new(200).header("content-type", "text/event-stream").header("cache-control", "no-cache")
    }

    /// The same reply with another status.
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
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

    /// Adds `bytes` to the body `times` over, sent one copy after another until the client hangs up: a body of
    /// many megabytes that the script does not hold.
    #[must_use]
    pub fn send_repeated(mut self, bytes: impl AsRef<[u8]>, times: usize) -> Self {
        self.parts.push(Part::Repeat(bytes.as_ref().to_vec(), times));
        self
    }

    /// Pauses the body until `gate` is open (at most 60 s).
    #[must_use]
    pub fn wait(mut self, gate: &Gate) -> Self {
        self.parts.push(Part::Wait(gate.clone()));
        self
    }

    /// Holds the connection open for `pause` at this point of the body (after the last part: before closing).
    #[must_use]
    pub fn hold(mut self, pause: Duration) -> Self {
        self.parts.push(Part::Hold(pause));
        self
    }

    /// Waits `delay` after the request has arrived before answering anything.
    #[must_use]
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Announces `missing` more body bytes than are sent, then closes: a truncated response. The announced length
    /// replaces any `content-length` header.
    #[must_use]
    pub fn truncated(mut self, missing: usize) -> Self {
        let sent: usize = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len(),
                Part::Repeat(b, n) => b.len() * n,
                Part::Wait(_) | Part::Hold(_) => 0,
            })
            .sum();
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case("content-length"));
        self.header("content-length", &(sent + missing).to_string())
    }
}

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query, percent-encoded as sent.
    pub target: String,
    /// Header lines in order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
    /// The whole request as text: request line, headers and body.
    pub raw: String,
    /// When it had arrived whole.
    pub at: Instant,
}

impl Request {
    /// The first header of that name (case-insensitive).
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    #[must_use]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// Parses a request received whole: the head up to the blank line, then `body` bytes.
    fn parse(bytes: &[u8], head_end: usize) -> Self {
        let head = String::from_utf8_lossy(&bytes[..head_end]);
        let mut lines = head.lines();
        let mut first = lines.next().unwrap_or_default().split(' ');
        let method = first.next().unwrap_or_default().to_owned();
        let target = first.next().unwrap_or_default().to_owned();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let body = String::from_utf8_lossy(bytes.get(head_end + 4..).unwrap_or_default()).into_owned();
        Self { method, target, headers, body, raw: String::from_utf8_lossy(bytes).into_owned(), at: Instant::now() }
    }
}

/// What answers a request: the request and its number (from 0, in order of arrival).
type Handler = Arc<dyn Fn(&Request, usize) -> Reply + Send + Sync>;

/// A real HTTP/1.1 server on 127.0.0.1 on threads of its own: each request, once it has arrived whole, is recorded
/// and answered with the reply its handler gives. It stops accepting when dropped.
pub struct ScriptedServer {
    url: String,
    requests: Arc<Mutex<Vec<Request>>>,
    stopped: Arc<AtomicBool>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer").field("url", &self.url).finish_non_exhaustive()
    }
}

impl ScriptedServer {
    /// Starts a server answering with `script`, in order of the requests; the last reply repeats.
    ///
    /// # Errors
    /// No loopback port to bind.
    ///
    /// # Panics
    /// On an empty script.
    pub fn start(script: Vec<Reply>) -> io::Result<Self> {
        assert!(!script.is_empty(), "a script needs at least one reply");
        Self::serve(move |_, n| script[n.min(script.len() - 1)].clone())
    }

    /// Starts a server answering the `n`-th request (from 0) with `handler(request, n)`.
    ///
    /// # Errors
    /// No loopback port to bind.
    pub fn serve(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> io::Result<Self> {
        let handler: Handler = Arc::new(handler);
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(AtomicBool::new(false));
        let (seen, stop) = (Arc::clone(&requests), Arc::clone(&stopped));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::Acquire) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (seen, handler) = (Arc::clone(&seen), Arc::clone(&handler));
                std::thread::spawn(move || serve_one(conn, &handler, &seen));
            }
        });
        Ok(Self { url, requests, stopped })
    }

    /// `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Every request received so far as text (head and body), in order of arrival.
    #[must_use]
    pub fn requests(&self) -> Vec<String> {
        self.received().into_iter().map(|r| r.raw).collect()
    }

    /// Every request received so far, parsed, in order of arrival.
    #[must_use]
    pub fn received(&self) -> Vec<Request> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many requests have arrived so far.
    #[must_use]
    pub fn count(&self) -> usize {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).len()
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

/// Starts a [`ScriptedServer`] answering the `n`-th request with `handler(request, n)`.
///
/// # Panics
/// When no loopback port can be bound: this is test support.
pub fn serve(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> ScriptedServer {
    match ScriptedServer::serve(handler) {
        Ok(server) => server,
        Err(e) => panic!("cannot start a scripted HTTP server on 127.0.0.1: {e}"),
    }
}

/// A URL on 127.0.0.1 where nothing listens (a port bound, then released).
///
/// # Panics
/// When no loopback port can be bound: this is test support.
#[must_use]
pub fn closed_port() -> String {
    let bound = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
    match bound {
        Ok(address) => format!("http://{address}"),
        Err(e) => panic!("cannot bind a loopback port: {e}"),
    }
}

/// Reads one request whole (head, then `Content-Length` bytes of body), records it, and sends its reply.
fn serve_one(mut conn: TcpStream, handler: &Handler, seen: &Mutex<Vec<Request>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    let mut chunk = [0_u8; 4096];
    let head_end = loop {
        let Ok(k) = conn.read(&mut chunk) else { return };
        if k == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..k]);
        let Some((end, length)) = super::message_head(&buf) else { continue };
        let length = length.unwrap_or(0);
        if buf.len() >= end + 4 + length {
            buf.truncate(end + 4 + length);
            break end;
        }
    };
    let request = Request::parse(&buf, head_end);
    let n = {
        let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.push(request.clone());
        seen.len() - 1
    };
    let reply = handler(&request, n);
    std::thread::sleep(reply.delay);
    let mut head = format!("HTTP/1.1 {} Scripted\r\nconnection: close\r\n", reply.status);
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if write_flush(&mut conn, head.as_bytes()).is_err() {
        return;
    }
    for part in &reply.parts {
        let sent = match part {
            Part::Bytes(bytes) => write_flush(&mut conn, bytes),
            Part::Repeat(bytes, times) => (0..*times).try_for_each(|_| write_flush(&mut conn, bytes)),
            Part::Wait(gate) => {
                gate.wait(Duration::from_secs(60));
                Ok(())
            }
            Part::Hold(pause) => {
                std::thread::sleep(*pause);
                Ok(())
            }
        };
        if sent.is_err() {
            return;
        }
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

fn write_flush(conn: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    conn.write_all(bytes).and_then(|()| conn.flush())
}
