//! A tiny HTTP/1.1 proxy on 127.0.0.1 between `ObjectStorage` and the moto test server: each
//! request is forwarded (one request per connection, `Connection: close`) unless a rule
//! answers it with a made-up error instead, or forwards it and answers an error all the same
//! (a request the server applied whose answer was lost).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as the proxy saw it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The request target: path and query (`/bucket/key?uploadId=..`).
    pub target: String,
}

/// What the proxy does with one request.
#[derive(Debug, Clone)]
pub enum Action {
    /// Forward and pass the answer on.
    Forward,
    /// Answer `status` with the XML `body` without forwarding anything.
    Answer(u16, String),
    /// Forward, drop the server's answer, and answer `status` with the XML `body`.
    ForwardThenAnswer(u16, String),
}

type Rule = Box<dyn FnMut(&Request) -> Action + Send>;

/// A running proxy; stops accepting when dropped.
pub struct Proxy {
    pub endpoint: String,
    stop: Arc<AtomicBool>,
    rule: Arc<Mutex<Rule>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(self.endpoint.trim_start_matches("http://"));
    }
}

impl Proxy {
    /// A proxy in front of `upstream` (`http://127.0.0.1:<port>`), forwarding everything.
    pub fn start(upstream: &str) -> Proxy {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let rule: Arc<Mutex<Rule>> = Arc::new(Mutex::new(Box::new(|_| Action::Forward)));
        let (stop2, rule2) = (stop.clone(), rule.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (up, rule) = (upstream.clone(), rule2.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &up, &rule);
                });
            }
        });
        Proxy {
            endpoint,
            stop,
            rule,
        }
    }

    /// `options` (of the S3 test server) with their endpoint replaced by this proxy's.
    pub fn options(
        &self,
        mut options: rockstate::ObjectStorageOptions,
    ) -> rockstate::ObjectStorageOptions {
        for kv in options.s3.iter_mut() {
            if kv.0 == "aws_endpoint" {
                kv.1 = self.endpoint.clone();
            }
        }
        options
    }

    /// Replaces the rule.
    pub fn set_rule(&self, rule: impl FnMut(&Request) -> Action + Send + 'static) {
        *self.rule.lock().unwrap() = Box::new(rule);
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &str) -> usize {
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `head` with its Connection header replaced by `Connection: close`.
fn close_head(head: &str) -> String {
    let mut out = String::new();
    for (i, line) in head.split("\r\n").enumerate() {
        if line.is_empty() {
            continue;
        }
        if i > 0 {
            if let Some((k, _)) = line.split_once(':') {
                if k.trim().eq_ignore_ascii_case("connection") {
                    continue;
                }
            }
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

fn serve(mut client: TcpStream, upstream: &str, rule: &Mutex<Rule>) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(60)))?;
    // The request head.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 << 10];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut request_line = head.split(' ');
    let method = request_line.next().unwrap_or("").to_string();
    let target = request_line.next().unwrap_or("").to_string();
    let action = (rule.lock().unwrap())(&Request { method, target });
    // The request body.
    let body_len = content_length(&head);
    let mut body = buf[head_end..].to_vec();
    while body.len() < body_len {
        let n = client.read(&mut chunk[..(body_len - body.len()).min(64 << 10)])?;
        if n == 0 {
            return Ok(());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let made_up = |status: &u16, text: &str| {
        format!(
            "HTTP/1.1 {status} Injected\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
            text.len()
        )
    };
    if let Action::Answer(status, text) = &action {
        return client.write_all(made_up(status, text).as_bytes());
    }
    let mut up = TcpStream::connect(upstream)?;
    up.write_all(close_head(&head).as_bytes())?;
    up.write_all(&body)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    if let Action::ForwardThenAnswer(status, text) = &action {
        return client.write_all(made_up(status, text).as_bytes());
    }
    let Some(answer_head_end) = find(&answer, b"\r\n\r\n").map(|i| i + 4) else {
        return Ok(());
    };
    let answer_head = close_head(&String::from_utf8_lossy(&answer[..answer_head_end]));
    client.write_all(answer_head.as_bytes())?;
    client.write_all(&answer[answer_head_end..])
}
