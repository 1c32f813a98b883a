//! A canned HTTP/1.1 server on a loopback port: answers each request whose `METHOD target`
//! matches a route exactly, 404 otherwise, and records what it was sent. Enough to check the
//! client's requests and its printing without the real server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
    /// Send the body as one chunk of a chunked response, then keep the connection open without
    /// ending it (a log being followed).
    pub hold: bool,
}

impl Reply {
    pub fn json(status: u16, body: serde_json::Value) -> Reply {
        Reply { status, content_type: "application/json", body: body.to_string(), hold: false }
    }

    pub fn text(body: &str) -> Reply {
        Reply { status: 200, content_type: "text/plain", body: body.to_string(), hold: false }
    }
}

#[derive(Clone, Debug)]
pub struct Request {
    /// `METHOD target`, e.g. `GET /v1/jobs?name=x`.
    pub line: String,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

pub struct FakeServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl FakeServer {
    pub fn start(routes: Vec<(&str, Reply)>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let routes: Arc<Vec<(String, Reply)>> = Arc::new(routes.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        let recorded = Arc::clone(&requests);
        // The threads end with the test process.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (routes, recorded) = (Arc::clone(&routes), Arc::clone(&recorded));
                std::thread::spawn(move || serve(stream, &routes, &recorded));
            }
        });
        FakeServer { url, requests }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, routes: &[(String, Reply)], recorded: &Mutex<Vec<Request>>) -> Option<()> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut first = String::new();
    reader.read_line(&mut first).ok()?;
    let mut parts = first.split_whitespace();
    let line = format!("{} {}", parts.next()?, parts.next()?);
    let (mut length, mut content_type) = (0, None);
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "content-type" => content_type = Some(value.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    recorded.lock().unwrap().push(Request { line: line.clone(), content_type, body });
    let not_found = Reply { status: 404, ..Reply::text("no route") };
    let reply = routes.iter().find(|(key, _)| *key == line).map_or(&not_found, |(_, reply)| reply);
    let (status, content_type, len) = (reply.status, reply.content_type, reply.body.len());
    let mut stream = stream;
    if reply.hold {
        let head = format!("HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n");
        let chunk = format!("{len:x}\r\n{}\r\n", reply.body);
        stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(chunk.as_bytes())).ok()?;
        std::thread::sleep(std::time::Duration::from_secs(60));
    } else {
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(reply.body.as_bytes())).ok()?;
    }
    Some(())
}
