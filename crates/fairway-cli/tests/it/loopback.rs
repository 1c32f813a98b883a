//! Real receivers on loopback for the monitoring and notification tests: an SMTP server
//! (Debian's `python3-aiosmtpd`, storing a maildir), a webhook that keeps every body, and
//! the child processes they run as.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child process killed when the test ends, whatever happens.
pub struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn(program: &'static str, args: &[String], log: &Path) -> Running {
    let out = std::fs::File::create(log).unwrap();
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("{program} (the test script installs it from Debian): {e}"));
    Running(child)
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A webhook receiver: every request body it gets, in order.
pub fn webhook() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok() {
                kept.lock().unwrap().push(String::from_utf8_lossy(&body).into_owned());
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    (port, bodies)
}

/// Every message the SMTP server stored so far, oldest first, quoted-printable bodies
/// decoded (soft line breaks joined, `=XX` escapes read).
pub fn mails(maildir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(maildir.join("new")) else { return Vec::new() };
    let mut mails: Vec<(std::time::SystemTime, String)> = entries
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, std::fs::read_to_string(e.path()).ok()?)))
        .collect();
    mails.sort();
    mails.into_iter().map(|(_, m)| decode_quoted_printable(&m)).collect()
}

fn decode_quoted_printable(mail: &str) -> String {
    if !mail.contains("Content-Transfer-Encoding: quoted-printable") {
        return mail.to_owned();
    }
    let joined = mail.replace("=\r\n", "").replace("=\n", "");
    let mut out = Vec::with_capacity(joined.len());
    let bytes = joined.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'=', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A real SMTP server on `127.0.0.1:port` storing each message in `maildir`.
pub fn smtp_server(port: u16, maildir: &Path, log: &Path) -> Running {
    spawn(
        "/usr/bin/python3",
        &[
            "-m".into(),
            "aiosmtpd".into(),
            "-n".into(),
            "-l".into(),
            format!("127.0.0.1:{port}"),
            "-c".into(),
            "aiosmtpd.handlers.Mailbox".into(),
            maildir.display().to_string(),
        ],
        log,
    )
}

/// Polls `f` until it answers, for at most 90 s; on timeout, fails with the tail of each of
/// `logs` (the receivers' own logs say why nothing arrived).
pub fn wait_until<T>(what: &str, logs: &[std::path::PathBuf], mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(t) = f() {
            return t;
        }
        if Instant::now() > deadline {
            let mut dump = String::new();
            for log in logs {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(15).collect();
                let lines = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                dump += &format!("--- {}\n{lines}\n", log.display());
            }
            panic!("timed out waiting for {what}\n{dump}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
