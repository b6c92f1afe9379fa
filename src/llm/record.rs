//! Record and replay. A [`Recorder`] appends one JSON line per exchange:
//!
//! ```json
//! {"request_hash": "<sha256 hex>",
//!  "request": {"provider": "openai", "model": "o3", "system": "...",
//!              "messages": [{"role": "user", "content": "..."}],
//!              "sampling": {"temperature": null, "max_output_tokens": 4096, "reasoning_effort": "high"}},
//!  "response": {"text": "...", "finish": "stop", "usage": {...}, "model": "o3-2025-04-16", "latency_ms": 8120}}
//! ```
//!
//! The request is the canonical form of what was asked ([`CanonicalRequest`]: no key, no base
//! URL, no headers), and `request_hash` is the sha256 of its JSON. A `replay:FILE` model serves
//! these back with no network: a request is matched by hash against every provider and model the
//! file holds, identical requests get their recorded responses in order (the last one again once
//! they run out), and a request matching none is an error naming its hash and the file.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::usage::Usage;
use super::{
    ChatRequest, ChatResponse, FinishReason, LlmClient, LlmError, LlmFuture, Message, ModelSpec,
    PriceTable, ProviderKind, Sampling,
};

/// What identifies a request: who was asked and exactly what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanonicalRequest {
    pub provider: ProviderKind,
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub sampling: Sampling,
}

impl CanonicalRequest {
    pub fn new(provider: ProviderKind, model: &str, request: &ChatRequest) -> CanonicalRequest {
        CanonicalRequest {
            provider,
            model: model.to_string(),
            system: request.system.clone(),
            messages: request.messages.clone(),
            sampling: request.sampling.clone(),
        }
    }

    /// sha256 (hex) of the JSON of this request, fields in declaration order.
    pub fn hash(&self) -> String {
        // Strings, numbers, options and lists of them always serialize (a non-finite float
        // becomes null), so this cannot fail.
        let json = serde_json::to_vec(self).expect("a canonical request always serializes");
        hex::encode(Sha256::digest(&json))
    }
}

/// A response as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedResponse {
    pub text: String,
    pub finish: FinishReason,
    pub usage: Option<Usage>,
    /// The model that answered, as the server named it.
    pub model: String,
    /// Wall time of the original call, for reading the record; replays do not wait for it.
    #[serde(default)]
    pub latency_ms: u64,
}

/// One line of a recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedExchange {
    pub request_hash: String,
    pub request: CanonicalRequest,
    pub response: RecordedResponse,
}

/// Appends exchanges to a JSON-lines file; shared by every client of a run.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    file: Mutex<File>,
}

impl Recorder {
    /// Opens `path` for appending, creating it and its folder if needed.
    pub fn create(path: impl Into<PathBuf>) -> Result<Recorder, LlmError> {
        let path = path.into();
        let fail = |e: std::io::Error| LlmError::Record {
            path: path.clone(),
            detail: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(fail)?;
        Ok(Recorder {
            path,
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one exchange as one line, written whole so concurrent calls never interleave.
    pub fn record(&self, exchange: &RecordedExchange) -> Result<(), LlmError> {
        let fail = |detail: String| LlmError::Record {
            path: self.path.clone(),
            detail,
        };
        let mut line = serde_json::to_string(exchange).map_err(|e| fail(e.to_string()))?;
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.write_all(line.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|e| fail(e.to_string()))
    }
}

/// Serves a recorded file back (the `replay:FILE` provider).
pub struct ReplayClient {
    spec: ModelSpec,
    path: PathBuf,
    /// Each (provider, model) the file holds, in first-seen order: a request is hashed as each.
    askers: Vec<(ProviderKind, String)>,
    /// Responses by request hash, in recorded order.
    responses: HashMap<String, Vec<RecordedResponse>>,
    /// How many of each hash's responses were served.
    served: Mutex<HashMap<String, usize>>,
    prices: Arc<PriceTable>,
    recorder: Option<Arc<Recorder>>,
}

impl ReplayClient {
    /// Loads the file named by a `replay:FILE` spec.
    pub fn open(
        spec: ModelSpec,
        prices: Arc<PriceTable>,
        recorder: Option<Arc<Recorder>>,
    ) -> Result<ReplayClient, LlmError> {
        let path = PathBuf::from(&spec.model);
        let bad = |detail: String| LlmError::ReplayFile {
            path: path.clone(),
            detail,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
        let mut askers = Vec::new();
        let mut responses: HashMap<String, Vec<RecordedResponse>> = HashMap::new();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let exchange: RecordedExchange =
                serde_json::from_str(line).map_err(|e| bad(format!("line {}: {e}", number + 1)))?;
            let hash = exchange.request.hash();
            if hash != exchange.request_hash {
                return Err(bad(format!(
                    "line {}: request_hash does not match the request recorded with it (was the \
                     request edited by hand?)",
                    number + 1
                )));
            }
            let asker = (exchange.request.provider, exchange.request.model);
            if !askers.contains(&asker) {
                askers.push(asker);
            }
            responses.entry(hash).or_default().push(exchange.response);
        }
        if responses.is_empty() {
            return Err(bad("the file holds no recorded exchanges".into()));
        }
        Ok(ReplayClient {
            spec,
            path,
            askers,
            responses,
            served: Mutex::new(HashMap::new()),
            prices,
            recorder,
        })
    }

    fn serve(&self, request: &ChatRequest) -> Result<ChatResponse, LlmError> {
        let started = Instant::now();
        let candidates: Vec<CanonicalRequest> = self
            .askers
            .iter()
            .map(|(provider, model)| CanonicalRequest::new(*provider, model, request))
            .collect();
        let hashes: Vec<String> = candidates.iter().map(CanonicalRequest::hash).collect();
        let Some((canonical, hash, recorded)) = candidates
            .into_iter()
            .zip(&hashes)
            .find_map(|(c, h)| self.responses.get(h).map(|r| (c, h.clone(), r)))
        else {
            return Err(LlmError::ReplayMiss {
                path: self.path.clone(),
                hash: hashes.join(" or "),
            });
        };
        let response = {
            let mut served = self.served.lock().unwrap_or_else(PoisonError::into_inner);
            let count = served.entry(hash.clone()).or_insert(0);
            let index = (*count).min(recorded.len() - 1);
            *count += 1;
            recorded[index].clone()
        };
        let cost = self.prices.cost(
            &[canonical.model.as_str(), response.model.as_str()],
            response.usage.as_ref(),
        );
        if let Some(recorder) = &self.recorder {
            recorder.record(&RecordedExchange {
                request_hash: hash.clone(),
                request: canonical,
                response: response.clone(),
            })?;
        }
        Ok(ChatResponse {
            text: response.text,
            finish: response.finish,
            usage: response.usage,
            cost,
            latency: started.elapsed(),
            model: response.model,
            request_hash: hash,
            attempts: 1,
        })
    }
}

impl LlmClient for ReplayClient {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> LlmFuture<'a> {
        Box::pin(async move { self.serve(request) })
    }

    fn spec(&self) -> &ModelSpec {
        &self.spec
    }
}

/// A run's own recording (`llm.jsonl` in its run directory): every exchange the run made is
/// appended to it, and a resumed run answers a request it already made from it, each recorded
/// response at most once and only for the same provider and model, so a call paid for before the
/// run was killed is never paid again. Shared by every client of the run ([`RecordingClient`]).
pub struct RunRecording {
    recorder: Recorder,
    /// Unserved recorded responses by request hash, oldest first.
    unserved: Mutex<HashMap<String, std::collections::VecDeque<RecordedResponse>>>,
    prices: Arc<PriceTable>,
}

impl RunRecording {
    /// Opens (or creates) `path`; what it already holds is served before any live call.
    pub fn open(path: &Path, prices: Arc<PriceTable>) -> Result<RunRecording, LlmError> {
        let bad = |detail: String| LlmError::ReplayFile {
            path: path.to_path_buf(),
            detail,
        };
        // A run killed mid-write leaves a torn last line: it is cut off, the rest is kept.
        let bytes = match crate::store::read_whole_lines(path) {
            Ok((bytes, _)) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(bad(e.to_string())),
        };
        let text = String::from_utf8(bytes).map_err(|e| bad(e.to_string()))?;
        let mut unserved: HashMap<String, std::collections::VecDeque<RecordedResponse>> =
            HashMap::new();
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let exchange: RecordedExchange =
                serde_json::from_str(line).map_err(|e| bad(format!("line {}: {e}", number + 1)))?;
            if exchange.request.hash() != exchange.request_hash {
                return Err(bad(format!(
                    "line {}: request_hash does not match the request recorded with it",
                    number + 1
                )));
            }
            unserved
                .entry(exchange.request_hash)
                .or_default()
                .push_back(exchange.response);
        }
        Ok(RunRecording {
            recorder: Recorder::create(path)?,
            unserved: Mutex::new(unserved),
            prices,
        })
    }

    /// Recorded responses not yet served.
    pub fn unserved(&self) -> usize {
        let unserved = self.unserved.lock().unwrap_or_else(PoisonError::into_inner);
        unserved.values().map(|queue| queue.len()).sum()
    }

    fn take(&self, spec: &ModelSpec, request: &ChatRequest) -> Option<ChatResponse> {
        let hash = CanonicalRequest::new(spec.provider, &spec.model, request).hash();
        let response = {
            let mut unserved = self.unserved.lock().unwrap_or_else(PoisonError::into_inner);
            unserved.get_mut(&hash)?.pop_front()?
        };
        tracing::debug!(hash = %hash, "answered from the run's recording");
        Some(ChatResponse {
            cost: self.prices.cost(
                &[spec.model.as_str(), response.model.as_str()],
                response.usage.as_ref(),
            ),
            text: response.text,
            finish: response.finish,
            usage: response.usage,
            latency: std::time::Duration::ZERO,
            model: response.model,
            request_hash: hash,
            attempts: 1,
        })
    }

    fn record(
        &self,
        spec: &ModelSpec,
        request: &ChatRequest,
        response: &ChatResponse,
    ) -> Result<(), LlmError> {
        let canonical = CanonicalRequest::new(spec.provider, &spec.model, request);
        self.recorder.record(&RecordedExchange {
            request_hash: canonical.hash(),
            request: canonical,
            response: RecordedResponse {
                text: response.text.clone(),
                finish: response.finish.clone(),
                usage: response.usage,
                model: response.model.clone(),
                latency_ms: u64::try_from(response.latency.as_millis()).unwrap_or(u64::MAX),
            },
        })
    }
}

/// A client of a run: a request the run's recording already answers is served from it; anything
/// else goes to `inner` and is recorded before it is returned.
pub struct RecordingClient {
    inner: Arc<dyn LlmClient>,
    recording: Arc<RunRecording>,
}

impl RecordingClient {
    pub fn new(inner: Arc<dyn LlmClient>, recording: Arc<RunRecording>) -> RecordingClient {
        RecordingClient { inner, recording }
    }
}

impl LlmClient for RecordingClient {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> LlmFuture<'a> {
        Box::pin(async move {
            let spec = self.inner.spec();
            if let Some(response) = self.recording.take(spec, request) {
                return Ok(response);
            }
            let response = self.inner.complete(request).await?;
            self.recording.record(spec, request, &response)?;
            Ok(response)
        })
    }

    fn spec(&self) -> &ModelSpec {
        self.inner.spec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(prompt: &str) -> ChatRequest {
        ChatRequest {
            system: Some("sys".into()),
            messages: vec![Message::user(prompt)],
            sampling: Sampling::default(),
        }
    }

    fn exchange(provider: ProviderKind, model: &str, prompt: &str, text: &str) -> RecordedExchange {
        let request = CanonicalRequest::new(provider, model, &request(prompt));
        RecordedExchange {
            request_hash: request.hash(),
            request,
            response: RecordedResponse {
                text: text.into(),
                finish: FinishReason::Stop,
                usage: Some(Usage {
                    input_tokens: 1000,
                    output_tokens: 100,
                    ..Usage::default()
                }),
                model: format!("{model}-served"),
                latency_ms: 5,
            },
        }
    }

    #[test]
    fn hash_depends_on_every_part_of_the_request() {
        let base = CanonicalRequest::new(ProviderKind::OpenAi, "o3", &request("a"));
        let mut seen = vec![base.hash()];
        let mut variants = vec![
            CanonicalRequest::new(ProviderKind::Anthropic, "o3", &request("a")),
            CanonicalRequest::new(ProviderKind::OpenAi, "o4-mini", &request("a")),
            CanonicalRequest::new(ProviderKind::OpenAi, "o3", &request("b")),
        ];
        let mut other = base.clone();
        other.system = None;
        variants.push(other);
        let mut other = base.clone();
        other.sampling.temperature = Some(0.0);
        variants.push(other);
        for variant in variants {
            let hash = variant.hash();
            assert!(!seen.contains(&hash), "{variant:?}");
            seen.push(hash);
        }
        assert_eq!(base.hash(), base.clone().hash());
        assert_eq!(base.hash().len(), 64);
    }

    #[tokio::test]
    async fn replays_in_order_for_both_agents_and_names_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/llm.jsonl");
        let recorder = Recorder::create(&path).unwrap();
        for e in [
            exchange(ProviderKind::OpenAi, "gpt-4o", "p", "first"),
            exchange(ProviderKind::OpenAi, "gpt-4o", "p", "second"),
            exchange(ProviderKind::Anthropic, "claude-haiku-4-5", "q", "judged"),
        ] {
            recorder.record(&e).unwrap();
        }
        let spec = ModelSpec::parse(&format!("replay:{}", path.display())).unwrap();
        let replay = ReplayClient::open(spec, PriceTable::shipped(), None).unwrap();
        let texts = [
            replay.serve(&request("p")).unwrap().text,
            replay.serve(&request("p")).unwrap().text,
            replay.serve(&request("p")).unwrap().text,
        ];
        assert_eq!(texts, ["first", "second", "second"]);
        let judged = replay.serve(&request("q")).unwrap();
        assert_eq!(judged.text, "judged");
        assert_eq!(judged.model, "claude-haiku-4-5-served");
        // claude-haiku-4-5: 1000 in at $1/M, 100 out at $5/M.
        assert_eq!(judged.cost.usd().map(|c| (c * 1e6).round()), Some(1500.0));

        let err = replay.serve(&request("never asked")).unwrap_err();
        let LlmError::ReplayMiss { hash, .. } = &err else {
            panic!("{err:?}");
        };
        let expected =
            CanonicalRequest::new(ProviderKind::OpenAi, "gpt-4o", &request("never asked"));
        assert!(hash.contains(&expected.hash()), "{hash}");
        let message = err.to_string();
        assert!(message.contains("llm.jsonl"), "{message}");
        assert!(
            message.contains("differs from every recorded one"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_resumed_run_never_pays_twice_for_a_recorded_call() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("llm.jsonl");
        let spec = ModelSpec::parse("openai:gpt-4o").unwrap();
        let scripted = |texts: &[&str]| {
            Arc::new(crate::llm::ScriptedClient::new(
                spec.clone(),
                texts.iter().map(|t| {
                    Ok(crate::llm::ScriptedReply::text(*t).with_usage(Usage {
                        input_tokens: 1000,
                        output_tokens: 100,
                        ..Usage::default()
                    }))
                }),
            ))
        };
        // The first run makes two calls, then is killed mid-write of a third line.
        let first_live = scripted(&["one", "two"]);
        let recording = Arc::new(RunRecording::open(&path, PriceTable::shipped()).unwrap());
        let client = RecordingClient::new(first_live.clone(), recording);
        assert_eq!(client.complete(&request("p")).await.unwrap().text, "one");
        assert_eq!(client.complete(&request("q")).await.unwrap().text, "two");
        drop(client);
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"request_hash\": \"ab")
            .unwrap();

        // The resumed run asks p, q and p again: only the second p is new.
        let resumed_live = scripted(&["three"]);
        let recording = Arc::new(RunRecording::open(&path, PriceTable::shipped()).unwrap());
        assert_eq!(recording.unserved(), 2);
        let client = RecordingClient::new(resumed_live.clone(), recording.clone());
        let p = client.complete(&request("p")).await.unwrap();
        assert_eq!(p.text, "one");
        assert!(p.cost.usd().is_some_and(|c| c > 0.0), "{:?}", p.cost);
        assert_eq!(client.complete(&request("q")).await.unwrap().text, "two");
        assert_eq!(client.complete(&request("p")).await.unwrap().text, "three");
        assert_eq!(resumed_live.requests().len(), 1);
        assert_eq!(recording.unserved(), 0);
        // Another model asking the same prompt is not answered from this model's record.
        let other = Arc::new(crate::llm::ScriptedClient::replying(
            ModelSpec::parse("anthropic:claude-haiku-4-5").unwrap(),
            ["fresh"],
        ));
        let recording = Arc::new(RunRecording::open(&path, PriceTable::shipped()).unwrap());
        let client = RecordingClient::new(other, recording);
        assert_eq!(client.complete(&request("q")).await.unwrap().text, "fresh");
        // The torn line was cut off and every line is whole JSON.
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        for line in text.lines() {
            serde_json::from_str::<RecordedExchange>(line).unwrap();
        }
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        let open = |p: &Path| {
            ReplayClient::open(
                ModelSpec::parse(&format!("replay:{}", p.display())).unwrap(),
                PriceTable::shipped(),
                None,
            )
        };
        assert!(open(&path).is_err());
        std::fs::write(&path, "\n").unwrap();
        let err = open(&path).err().unwrap().to_string();
        assert!(err.contains("no recorded exchanges"), "{err}");
        let mut tampered = exchange(ProviderKind::OpenAi, "o3", "p", "t");
        tampered.request.messages[0].content = "edited".into();
        std::fs::write(&path, serde_json::to_string(&tampered).unwrap()).unwrap();
        let err = open(&path).err().unwrap().to_string();
        assert!(err.contains("line 1: request_hash does not match"), "{err}");
        std::fs::write(&path, "{not json").unwrap();
        let err = open(&path).err().unwrap().to_string();
        assert!(err.contains("line 1"), "{err}");
    }
}
