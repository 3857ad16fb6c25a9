//! A real S3-compatible server for the tests: moto (PyPI `moto[server]`, installed by
//! `scripts/setup.sh`), started once per test binary on a free 127.0.0.1 port. The server
//! stops when the test process exits (its stdin pipe closes) or when dropped. If it cannot
//! start, the test panics with what to do: S3 tests are never skipped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rockstate::{ObjectStorage, ObjectStorageOptions};

const WRAPPER: &str = include_str!("moto_server.py");
/// moto needs a few seconds to import; much more on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running moto server.
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    port: u16,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port on 127.0.0.1")
}

impl S3Server {
    /// Starts a server; panics with a clear message if it cannot.
    pub fn start() -> S3Server {
        let mut last_error = String::new();
        for _ in 0..3 {
            let port = free_port();
            match Self::try_start(port) {
                Ok(s) => return s,
                Err(e) => last_error = e,
            }
        }
        panic!(
            "the S3 test server (moto) could not start: {last_error}\n\
             Install it with `bash scripts/setup.sh` (pip install 'moto[server]'); \
             the S3 tests need it and are not skipped."
        );
    }

    fn try_start(port: u16) -> Result<S3Server, String> {
        let mut child = Command::new("python3")
            .args(["-c", WRAPPER, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run python3: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut stderr = child.stderr.take().ok_or("no stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let ready = rx.recv_timeout(START_TIMEOUT).unwrap_or_default();
        if ready.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = String::new();
            let _ = stderr.read_to_string(&mut err);
            return Err(format!(
                "no `ready` from moto on port {port}: {}",
                err.trim()
            ));
        }
        // Drain stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
        });
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
        };
        server.http("GET", "/")?;
        Ok(server)
    }

    /// One plain HTTP request (moto accepts unsigned bucket creation); returns the status
    /// line.
    fn http(&self, method: &str, path: &str) -> Result<String, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))
            .map_err(|e| format!("connect to {}: {e}", self.endpoint))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .map_err(|e| e.to_string())?;
        let mut status = String::new();
        BufReader::new(s)
            .read_line(&mut status)
            .map_err(|e| e.to_string())?;
        if status.starts_with("HTTP/1.1 2") || status.starts_with("HTTP/1.0 2") {
            Ok(status)
        } else {
            Err(format!("{method} {path}: {}", status.trim()))
        }
    }

    /// The body of a plain unsigned `GET path` (moto answers without checking signatures):
    /// what the server holds, read past every client.
    pub fn get_raw(&self, path: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.endpoint));
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
        body.to_string()
    }

    /// Stores an empty object at `key` of `bucket` with a plain unsigned request, bypassing
    /// every client's key checks (another system's odd key: `a//b`, `a/./b`).
    pub fn put_raw(&self, bucket: &str, key: &str) {
        self.http("PUT", &format!("/{bucket}/{key}"))
            .unwrap_or_else(|e| panic!("storing {bucket}/{key} on the S3 test server: {e}"));
    }

    /// Creates bucket `name`.
    pub fn create_bucket(&self, name: &str) {
        self.http("PUT", &format!("/{name}"))
            .unwrap_or_else(|e| panic!("creating bucket {name} on the S3 test server: {e}"));
    }

    /// Options pointing at this server.
    pub fn options(&self) -> ObjectStorageOptions {
        options_for(&self.endpoint)
    }

    /// A fresh bucket; returns `s3://<bucket>/<prefix>`.
    pub fn bucket_url(&self, prefix: &str) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let bucket = format!(
            "rockstate-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        self.create_bucket(&bucket);
        format!("s3://{bucket}/{prefix}")
    }

    /// A fresh bucket and storage on it under `prefix`.
    pub fn storage_with(&self, prefix: &str, options: ObjectStorageOptions) -> Arc<ObjectStorage> {
        let url = self.bucket_url(prefix);
        Arc::new(ObjectStorage::open(&url, &options).expect("opening S3 storage"))
    }

    /// A fresh bucket and storage on it with default options.
    pub fn storage(&self) -> Arc<ObjectStorage> {
        self.storage_with("job", self.options())
    }
}

/// The bucket of an `s3://<bucket>/<prefix>` URL ([`S3Server::bucket_url`]).
pub fn bucket_of(url: &str) -> &str {
    let rest = url.strip_prefix("s3://").expect("an s3:// URL");
    rest.split('/').next().unwrap_or(rest)
}

/// Options pointing at the test server at `endpoint` (also usable in a child process that
/// got the endpoint from its parent).
pub fn options_for(endpoint: &str) -> ObjectStorageOptions {
    ObjectStorageOptions {
        s3: vec![
            ("aws_endpoint".into(), endpoint.to_string()),
            ("aws_access_key_id".into(), "testing".into()),
            ("aws_secret_access_key".into(), "testing".into()),
            ("aws_region".into(), "us-east-1".into()),
        ],
        ..ObjectStorageOptions::default()
    }
}

/// The server of this test binary, started on first use.
pub fn server() -> &'static S3Server {
    static SERVER: OnceLock<S3Server> = OnceLock::new();
    SERVER.get_or_init(S3Server::start)
}

/// Runs each test body `fn name(fixture)` (defined next to the invocation) twice: as
/// `local::name` with `$module::$fixture::$local()` and as `s3::name` with
/// `$module::$fixture::$s3()`, where `$module` is a module at the test crate's root.
#[macro_export]
macro_rules! on_local_and_s3 {
    ($module:ident :: $fixture:ident, $local:ident, $s3:ident; $($name:ident),* $(,)?) => {
        mod local {
            $(#[test]
            fn $name() {
                super::$name($crate::$module::$fixture::$local())
            })*
        }
        mod s3 {
            $(#[test]
            fn $name() {
                super::$name($crate::$module::$fixture::$s3())
            })*
        }
    };
}
