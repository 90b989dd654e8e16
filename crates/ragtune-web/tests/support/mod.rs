//! A real HTTP/1.1 server on 127.0.0.1 whose answers a test scripts per request: status, headers, raw body bytes
//! (so invalid UTF-8 and truncated bodies can be sent), a delay, and every request recorded with its arrival time.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Request {
    /// `GET`, `POST`.
    pub method: String,
    /// Path and query, percent-encoded as sent.
    pub target: String,
    /// Header lines, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
    /// When it arrived.
    pub at: Instant,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// One answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub delay: Duration,
    /// Announce this many more body bytes than are sent, then close: a truncated response.
    pub missing: usize,
}

impl Reply {
    pub fn json(value: &serde_json::Value) -> Self {
        Self::raw(200, "application/json", value.to_string().into_bytes())
    }

    pub fn raw(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.into(),
            delay: Duration::ZERO,
            missing: 0,
        }
    }

    pub fn status(status: u16) -> Self {
        Self::raw(status, "text/plain", format!("status {status}"))
    }

    pub fn with_status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub fn truncated(mut self, missing: usize) -> Self {
        self.missing = missing;
        self
    }
}

type Handler = Arc<dyn Fn(&Request, usize) -> Reply + Send + Sync>;

/// The running server.
pub struct Server {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

/// Serves `handler(request, n)` for the `n`-th request (from 0).
pub async fn serve(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> Server {
    let handler: Handler = Arc::new(handler);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&requests);
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { return };
            let handler = Arc::clone(&handler);
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0_u8; 4096];
                let (head_end, len) = loop {
                    let Ok(k) = sock.read(&mut chunk).await else { return };
                    if k == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..k]);
                    if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        let len = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            break (end, len);
                        }
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let mut lines = head.lines();
                let mut first = lines.next().unwrap_or_default().split(' ');
                let request = Request {
                    method: first.next().unwrap_or_default().to_owned(),
                    target: first.next().unwrap_or_default().to_owned(),
                    headers: lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                        .collect(),
                    body: String::from_utf8_lossy(&buf[head_end + 4..head_end + 4 + len]).to_string(),
                    at: Instant::now(),
                };
                let n = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(request.clone());
                    seen.len() - 1
                };
                let reply = handler(&request, n);
                tokio::time::sleep(reply.delay).await;
                let mut head = format!(
                    "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                    reply.status,
                    reply.body.len() + reply.missing
                );
                for (k, v) in &reply.headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                head.push_str("\r\n");
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(&reply.body).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Server { url, requests }
}

/// A URL on 127.0.0.1 where nothing listens.
pub fn closed_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}
