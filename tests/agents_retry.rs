//! The agents' calls with a scripted model: one retry that quotes the validation error, every
//! call's usage and cost returned, and a typed error when the retry fails too.

mod agents_support;

use agents_support::{Fixtures, children_of_correct, history, path_to_correct};
use kforge::agents::{
    AgentError, CoderReplyError, CoderTask, JudgeReplyError, JudgeTask, JudgeVerdict, JudgedNode,
    Prompts, ReplyError, ask_coder, ask_judge,
};
use kforge::llm::{
    Cost, FinishReason, LlmError, ModelSpec, Role, Sampling, ScriptedClient, ScriptedReply, Usage,
};
use kforge::search::{TriedResult, TriedStrategy};

const GOOD_JUDGE: &str = r#"{"bottleneck": {"diagnosis": "Latency-bound at 43% of peak DRAM", "evidence": [{"metric": "dram__throughput.avg.pct_of_peak_sustained_elapsed", "value": "43.0%"}]}, "prescriptions": [{"rank": 1, "edit": "Fuse the two reduction passes", "rationale": "One pass fewer", "prediction": "DRAM 43% -> 60%, time -25%"}]}"#;
const EMPTY_PRESCRIPTIONS: &str = r#"{"bottleneck": {"diagnosis": "Latency-bound", "evidence": [{"metric": "dram__throughput.avg.pct_of_peak_sustained_elapsed", "value": "43.0%"}]}, "prescriptions": []}"#;

const KERNEL: &str = "#include \"kforge.h\"\nextern \"C\" int kforge_forward(const kf_tensor *inputs, int num_inputs, const kf_tensor *params, int num_params, kf_tensor *outputs, int num_outputs, cudaStream_t stream) {\n  return 0;\n}\n";

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        ..Usage::default()
    }
}

/// A model with a known price, so costs add up to a number.
fn client(replies: Vec<Result<ScriptedReply, LlmError>>) -> ScriptedClient {
    ScriptedClient::new(ModelSpec::parse("openai:gpt-4o").unwrap(), replies)
}

fn reply(text: &str, input: u64, output: u64) -> Result<ScriptedReply, LlmError> {
    Ok(ScriptedReply::text(text).with_usage(usage(input, output)))
}

struct Node {
    siblings: Vec<TriedStrategy>,
    ancestors: Vec<TriedStrategy>,
}

fn node() -> Node {
    Node {
        siblings: children_of_correct(),
        ancestors: path_to_correct(),
    }
}

fn judge_task<'a>(f: &'a Fixtures, node: &'a Node) -> JudgeTask<'a> {
    JudgeTask::Optimize {
        node: JudgedNode::Kernel(f.correct()),
        history: history(&node.siblings, &node.ancestors),
    }
}

#[tokio::test]
async fn an_invalid_judge_reply_is_retried_once_with_the_error_quoted() {
    let f = Fixtures::load();
    let node = node();
    let prompts = Prompts::shipped().unwrap();
    let llm = client(vec![
        reply(EMPTY_PRESCRIPTIONS, 9_000, 400),
        reply(GOOD_JUDGE, 9_600, 500),
    ]);
    let answer = ask_judge(
        &llm,
        &prompts,
        &f.run(),
        &judge_task(&f, &node),
        &Sampling::default(),
    )
    .await
    .unwrap();
    let JudgeVerdict::Optimize(verdict) = &answer.value else {
        panic!("an optimize verdict");
    };
    assert_eq!(
        verdict.prescriptions[0].edit,
        "Fuse the two reduction passes"
    );
    assert_eq!(answer.exchanges.len(), 2);
    assert_eq!(
        answer.exchanges[0].rejected.as_deref(),
        Some("the JSON breaks the rules: prescriptions is empty: give 1 to 5 ranked prescriptions")
    );
    assert_eq!(answer.exchanges[1].rejected, None);
    assert_eq!(answer.usage(), usage(18_600, 900));
    // gpt-4o: $2.50 per million input tokens, $10 per million output tokens.
    let Cost::Known(usd) = answer.cost() else {
        panic!("gpt-4o has a price");
    };
    assert!(
        (usd - (18_600.0 * 2.5 + 900.0 * 10.0) / 1e6).abs() < 1e-9,
        "{usd}"
    );

    let sent = llm.requests();
    assert_eq!(sent.len(), 2);
    let retry = &sent[1];
    assert_eq!(retry.system, sent[0].system);
    assert_eq!(retry.messages.len(), 3);
    assert_eq!(retry.messages[0], sent[0].messages[0]);
    assert_eq!(retry.messages[1].role, Role::Assistant);
    assert_eq!(retry.messages[1].content, EMPTY_PRESCRIPTIONS);
    assert!(
        retry.messages[2]
            .content
            .contains("prescriptions is empty: give 1 to 5 ranked prescriptions"),
        "{}",
        retry.messages[2].content
    );
    assert_eq!(&answer.exchanges[1].request, retry);
}

#[tokio::test]
async fn two_invalid_judge_replies_fail_with_the_last_validation_error() {
    let f = Fixtures::load();
    let node = node();
    let prompts = Prompts::shipped().unwrap();
    let prose = format!("{GOOD_JUDGE}\nLet me know if you need more.");
    let llm = client(vec![
        reply(EMPTY_PRESCRIPTIONS, 9_000, 400),
        reply(&prose, 9_600, 450),
    ]);
    let err = ask_judge(
        &llm,
        &prompts,
        &f.run(),
        &judge_task(&f, &node),
        &Sampling::default(),
    )
    .await
    .unwrap_err();
    let AgentError::InvalidReply {
        agent,
        error,
        exchanges,
    } = &err
    else {
        panic!("expected an invalid reply, got {err:?}");
    };
    assert_eq!(*agent, "judge");
    assert_eq!(
        *error,
        ReplyError::Judge(JudgeReplyError::ProseAroundJson { position: "after" })
    );
    assert_eq!(exchanges.len(), 2);
    assert!(exchanges.iter().all(|e| e.rejected.is_some()));
    assert_eq!(
        kforge::agents::total_usage(err.exchanges()),
        usage(18_600, 850)
    );
    let message = err.to_string();
    assert!(
        message.contains("the judge's reply was unusable, and so was its retry")
            && message.contains("text after the JSON object"),
        "{message}"
    );
    assert_eq!(llm.remaining(), 0, "no third call");
}

#[tokio::test]
async fn a_coder_reply_without_code_is_retried_and_the_code_returned() {
    let f = Fixtures::load();
    let prompts = Prompts::shipped().unwrap();
    let llm = client(vec![
        reply("I would use float4 loads.", 12_000, 50),
        reply(&format!("Here:\n```cuda\n{KERNEL}```\n"), 12_100, 900),
    ]);
    let task = CoderTask::Generate {
        prescription: None,
        history: history(&[], &[]),
    };
    let answer = ask_coder(&llm, &prompts, &f.run(), &task, &Sampling::default())
        .await
        .unwrap();
    assert_eq!(answer.value, KERNEL);
    assert_eq!(answer.exchanges.len(), 2);
    assert_eq!(answer.usage(), usage(24_100, 950));
    let retry = &llm.requests()[1];
    assert!(
        retry.messages[2]
            .content
            .starts_with("Your reply could not be used: the reply has no ```cuda code block;"),
        "{}",
        retry.messages[2].content
    );
}

#[tokio::test]
async fn two_unusable_coder_replies_fail_naming_the_problem() {
    let f = Fixtures::load();
    let node = node();
    let prompts = Prompts::shipped().unwrap();
    let two_blocks = format!("```cuda\n{KERNEL}```\nor\n```cuda\n{KERNEL}```\n");
    let llm = client(vec![
        reply(&two_blocks, 15_000, 1_800),
        reply(&two_blocks, 17_000, 1_800),
    ]);
    let task = CoderTask::Optimize {
        parent: f.correct(),
        prescription: "Fuse the two reduction passes",
        history: history(&node.siblings, &node.ancestors),
    };
    let err = ask_coder(&llm, &prompts, &f.run(), &task, &Sampling::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            AgentError::InvalidReply {
                agent: "coder",
                error: ReplyError::Coder(CoderReplyError::SeveralCodeBlocks { count: 2 }),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.exchanges().len(), 2);
    assert!(err.to_string().contains("2 ```cuda code blocks"), "{err}");
}

#[tokio::test]
async fn a_good_first_reply_takes_one_call() {
    let f = Fixtures::load();
    let node = node();
    let prompts = Prompts::shipped().unwrap();
    let llm = client(vec![reply(GOOD_JUDGE, 9_000, 400)]);
    let answer = ask_judge(
        &llm,
        &prompts,
        &f.run(),
        &judge_task(&f, &node),
        &Sampling::default(),
    )
    .await
    .unwrap();
    assert_eq!(answer.exchanges.len(), 1);
    assert_eq!(llm.requests().len(), 1);
}

#[tokio::test]
async fn a_failed_retry_call_keeps_the_first_calls_bill() {
    let f = Fixtures::load();
    let node = node();
    let prompts = Prompts::shipped().unwrap();
    let llm = client(vec![
        reply(EMPTY_PRESCRIPTIONS, 9_000, 400),
        Err(LlmError::ContextLength {
            limit: Some(128_000),
            message: "too long".into(),
        }),
    ]);
    let err = ask_judge(
        &llm,
        &prompts,
        &f.run(),
        &judge_task(&f, &node),
        &Sampling::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &err,
            AgentError::Llm {
                source: LlmError::ContextLength { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.exchanges().len(), 1);
    assert_eq!(
        kforge::agents::total_usage(err.exchanges()),
        usage(9_000, 400)
    );
}

#[tokio::test]
async fn a_reply_cut_off_at_the_output_limit_is_told_so() {
    let f = Fixtures::load();
    let prompts = Prompts::shipped().unwrap();
    let cut = ScriptedReply {
        text: format!("```cuda\n{}", &KERNEL[..60]),
        finish: FinishReason::MaxOutputTokens,
        usage: Some(usage(12_000, 16_000)),
    };
    let llm = client(vec![
        Ok(cut),
        reply(&format!("```cuda\n{KERNEL}```"), 12_000, 800),
    ]);
    let ancestors = vec![agents_support::tried(
        5,
        "Two rows per block",
        TriedResult::Failed {
            reason: f.two_rows.summary.clone(),
        },
        None,
    )];
    let task = CoderTask::Repair {
        failed: f.two_rows(),
        fix: None,
        history: history(&[], &ancestors),
    };
    let answer = ask_coder(&llm, &prompts, &f.run(), &task, &Sampling::default())
        .await
        .unwrap();
    assert_eq!(answer.value, KERNEL);
    let retry = &llm.requests()[1].messages[2].content;
    assert!(
        retry.contains("is never closed") && retry.contains("hit the output token limit"),
        "{retry}"
    );
}

#[tokio::test]
async fn an_unpriced_model_makes_the_total_cost_unknown() {
    let f = Fixtures::load();
    let node = node();
    let prompts = Prompts::shipped().unwrap();
    let llm = ScriptedClient::new(
        ModelSpec::parse("openai-compat:http://localhost:8000/v1#my-local-model").unwrap(),
        vec![
            reply(EMPTY_PRESCRIPTIONS, 9_000, 400),
            reply(GOOD_JUDGE, 9_000, 400),
        ],
    );
    let answer = ask_judge(
        &llm,
        &prompts,
        &f.run(),
        &judge_task(&f, &node),
        &Sampling::default(),
    )
    .await
    .unwrap();
    assert!(matches!(answer.cost(), Cost::Unknown(_)));
    assert_eq!(answer.usage(), usage(18_000, 800));
}
