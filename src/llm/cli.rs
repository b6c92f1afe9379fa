//! `kforge llm ...`: talking to the configured endpoints by hand. `kforge llm test` sends one
//! small request and prints the reply's first line, latency, tokens and cost (exit 0), or the
//! error in plain words (exit 1); a model name or setting it cannot use is bad usage (exit 2).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};

use crate::config::Settings;

use super::{
    Agent, ChatRequest, ChatResponse, FinishReason, Message, ModelSpec, Recorder, client_for,
    configured,
};

#[derive(Debug, Subcommand)]
pub enum LlmCommand {
    /// Send one small request and print the reply's first line, latency, tokens and cost.
    Test(TestArgs),
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Model as provider:model, e.g. openai:o3 or openai-compat:http://localhost:8000/v1#qwen3-coder
    /// (default: the Coder's model, llm.coder; with --judge the Judge's).
    #[arg(long, value_name = "PROVIDER:MODEL")]
    model: Option<String>,
    /// Send to this base URL instead of the configured one, e.g. http://localhost:8000/v1.
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Test the Judge's model and sampling settings instead of the Coder's.
    #[arg(long)]
    judge: bool,
    /// What to ask.
    #[arg(long, default_value = "Reply with the single word: ready")]
    prompt: String,
    /// Output token limit for this request (reasoning models spend part of it thinking).
    #[arg(long, default_value_t = 1024)]
    max_output_tokens: u32,
    /// Append the exchange to this file, to serve it back later with --model replay:FILE.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
}

pub async fn run(command: LlmCommand, settings: &Settings) -> anyhow::Result<ExitCode> {
    match command {
        LlmCommand::Test(args) => test(args, settings).await,
    }
}

async fn test(args: TestArgs, settings: &Settings) -> anyhow::Result<ExitCode> {
    let agent = if args.judge {
        Agent::Judge
    } else {
        Agent::Coder
    };
    let (mut spec, mut sampling) = match &args.model {
        Some(name) => (ModelSpec::parse(name)?, agent.sampling(settings).clone()),
        None => configured(settings, agent)?,
    };
    if let Some(url) = &args.base_url {
        spec = spec.with_base_url(url)?;
    }
    sampling.max_output_tokens = Some(args.max_output_tokens);
    let request = ChatRequest {
        system: None,
        messages: vec![Message::user(args.prompt)],
        sampling,
    };
    println!("model    {spec}");
    let recorder = match &args.record {
        Some(path) => Some(Arc::new(Recorder::create(path)?)),
        None => None,
    };
    let outcome = match client_for(&spec, settings, recorder) {
        Ok(client) => client.complete(&request).await,
        Err(err) => Err(err),
    };
    match outcome {
        Ok(response) => {
            print!("{}", render(&response));
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("kforge llm test: {err}");
            Ok(ExitCode::from(1))
        }
    }
}

/// The lines after `model`: reply, latency, tokens, cost.
fn render(response: &ChatResponse) -> String {
    let first_line = response
        .text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("(empty reply)");
    let mut out = format!("reply    {first_line}\n");
    match &response.finish {
        FinishReason::Stop => {}
        FinishReason::MaxOutputTokens => {
            out.push_str("finish   cut off at the output token limit (raise --max-output-tokens)\n")
        }
        FinishReason::Other(reason) => out.push_str(&format!("finish   {reason}\n")),
    }
    let attempts = match response.attempts {
        1 => "1 attempt".to_string(),
        n => format!("{n} attempts"),
    };
    out.push_str(&format!(
        "latency  {:.2} s ({attempts})\n",
        response.latency.as_secs_f64()
    ));
    match &response.usage {
        Some(u) => out.push_str(&format!(
            "tokens   {} in ({} cached), {} out ({} reasoning)\n",
            u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens
        )),
        None => out.push_str("tokens   not reported by the server\n"),
    }
    out.push_str(&format!("cost     {}\n", response.cost));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Cost, CostUnknown, Usage};
    use std::time::Duration;

    #[test]
    fn render_shows_first_line_tokens_latency_and_cost() {
        let mut response = ChatResponse {
            text: "\n  ready  \nmore".into(),
            finish: FinishReason::Stop,
            usage: Some(Usage {
                input_tokens: 12,
                cached_input_tokens: 4,
                cache_write_input_tokens: 0,
                output_tokens: 3,
                reasoning_tokens: 1,
            }),
            cost: Cost::Known(0.000031),
            latency: Duration::from_millis(1234),
            model: "m".into(),
            request_hash: "h".into(),
            attempts: 2,
        };
        assert_eq!(
            render(&response),
            "reply    ready\nlatency  1.23 s (2 attempts)\ntokens   12 in (4 cached), 3 out (1 \
             reasoning)\ncost     $0.000031\n"
        );
        response.text = String::new();
        response.usage = None;
        response.finish = FinishReason::MaxOutputTokens;
        response.cost = Cost::Unknown(CostUnknown::NoUsageReported);
        let shown = render(&response);
        assert!(shown.contains("(empty reply)"), "{shown}");
        assert!(shown.contains("cut off"), "{shown}");
        assert!(shown.contains("not reported"), "{shown}");
        assert!(shown.contains("cost     unknown"), "{shown}");
    }
}
