//! Shared pieces of the LLM tests: settings that point at a local fake server with millisecond
//! retry delays, a tiny hand-rolled HTTP server for what wiremock cannot fake (a body cut off
//! mid-stream, counting requests in flight), and a log buffer.

#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kforge::config::{Secret, Settings};
use kforge::llm::{ChatRequest, Message, Sampling};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A key that is easy to search for in logs and output.
pub const FAKE_KEY: &str = "sk-kforge-fake-key-7f3a9c1e5b";

/// Settings with fake keys for every provider, retries after 1 ms, waits capped at `max_wait`.
pub fn settings(max_wait: Duration) -> Settings {
    let mut settings = Settings::default();
    let llm = &mut settings.llm;
    llm.openai.api_key = Some(Secret::new(FAKE_KEY));
    llm.anthropic.api_key = Some(Secret::new(FAKE_KEY));
    llm.openai_compat.api_key = Some(Secret::new(FAKE_KEY));
    llm.max_retries = 2;
    llm.retry_base_delay_s = 0.001;
    llm.retry_max_delay_s = max_wait.as_secs_f64();
    llm.timeout_s = 5.0;
    settings
}

pub fn ask(prompt: &str) -> ChatRequest {
    ChatRequest {
        system: Some("You optimize CUDA kernels.".into()),
        messages: vec![Message::user(prompt)],
        sampling: Sampling {
            temperature: Some(0.2),
            max_output_tokens: Some(256),
            reasoning_effort: None,
        },
    }
}

/// A server on 127.0.0.1 that answers the n-th connection with `replies[n]` (the last one again
/// once they run out), written raw and followed by closing the connection, after `delay`.
/// It counts the most requests it ever held at once.
pub struct RawServer {
    pub base_url: String,
    pub requests: Arc<AtomicUsize>,
    pub max_in_flight: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn raw_server(replies: Vec<Vec<u8>>, delay: Duration) -> RawServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max_in_flight = Arc::new(AtomicUsize::new(0));
    let replies = Arc::new(replies);
    let task = {
        let (requests, max_in_flight) = (requests.clone(), max_in_flight.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let n = requests.fetch_add(1, Ordering::SeqCst);
                let reply = replies[n.min(replies.len() - 1)].clone();
                let (in_flight, max_in_flight) = (in_flight.clone(), max_in_flight.clone());
                tokio::spawn(async move {
                    read_request(&mut socket).await;
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    max_in_flight.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    let _ = socket.write_all(&reply).await;
                    let _ = socket.shutdown().await;
                });
            }
        })
    };
    RawServer {
        base_url,
        requests,
        max_in_flight,
        task,
    }
}

/// Reads one request, headers and `Content-Length` bytes of body, so closing afterwards does not
/// reset a connection with unread data.
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = socket.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        data.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&data);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return;
            }
        }
    }
}

/// A raw HTTP/1.1 reply with a JSON body.
pub fn http_reply(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A reply whose headers promise the whole body but whose connection closes halfway through it.
pub fn cut_off_reply(body: &str) -> Vec<u8> {
    let half = &body[..body.len() / 2];
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{half}",
        body.len()
    )
    .into_bytes()
}

/// Everything a tracing subscriber writes, kept for searching.
#[derive(Clone, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Sends every event of every crate, at trace level, to the returned buffer while the guard
/// lives (on this thread: use a current-thread runtime).
pub fn capture_logs() -> (LogBuffer, tracing::subscriber::DefaultGuard) {
    let buffer = LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(buffer.clone())
        .with_ansi(false)
        .finish();
    (buffer, tracing::subscriber::set_default(subscriber))
}
