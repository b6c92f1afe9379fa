//! What the Coder and the Judge may answer: good and bad replies, and the messages a retry
//! quotes back to the model.

use kforge::agents::{
    CoderReplyError, JudgeMode, JudgeReplyError, JudgeVerdict, parse_coder, parse_judge,
};

const KERNEL: &str = r#"#include "kforge.h"

__global__ void scale(const float *x, float *y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.f * x[i];
}

extern "C" int kforge_forward(const kf_tensor *inputs, int num_inputs,
                              const kf_tensor *params, int num_params,
                              kf_tensor *outputs, int num_outputs, cudaStream_t stream) {
  int64_t n = inputs[0].numel;
  scale<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(kf_ptr<const float>(inputs[0]),
                                                         kf_ptr<float>(outputs[0]), n);
  KF_CHECK_LAUNCH();
  return 0;
}
"#;

fn fenced(tag: &str, body: &str) -> String {
    format!("```{tag}\n{body}```\n")
}

#[test]
fn a_coder_reply_with_one_cuda_block_gives_its_code() {
    let reply = format!(
        "I vectorized nothing yet; this is a plain elementwise kernel.\n\n{}\nIt launches on the \
         given stream.",
        fenced("cuda", KERNEL)
    );
    assert_eq!(parse_coder(&reply).unwrap(), KERNEL);
    for tag in ["cu", "c++", "cpp", "CUDA"] {
        assert_eq!(parse_coder(&fenced(tag, KERNEL)).unwrap(), KERNEL, "{tag}");
    }
    // Blocks in other languages are not code blocks.
    let with_shell = format!(
        "{}{}",
        fenced("bash", "nvcc -shared k.cu\n"),
        fenced("cuda", KERNEL)
    );
    assert_eq!(parse_coder(&with_shell).unwrap(), KERNEL);
}

#[test]
fn a_coder_reply_without_a_cuda_block_says_what_it_had() {
    assert_eq!(
        parse_coder("I cannot do that."),
        Err(CoderReplyError::NoCodeBlock { other_tags: vec![] })
    );
    let err = parse_coder(&format!(
        "{}{}",
        fenced("python", "x = 1\n"),
        fenced("", KERNEL)
    ))
    .unwrap_err();
    assert_eq!(
        err,
        CoderReplyError::NoCodeBlock {
            other_tags: vec!["python".into(), "".into()]
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("no ```cuda code block (it has blocks tagged: python, untagged)"),
        "{message}"
    );
}

#[test]
fn a_coder_reply_with_two_cuda_blocks_is_refused() {
    let reply = format!("{}Then:\n{}", fenced("cuda", KERNEL), fenced("cu", KERNEL));
    let err = parse_coder(&reply).unwrap_err();
    assert_eq!(err, CoderReplyError::SeveralCodeBlocks { count: 2 });
    assert!(err.to_string().contains("exactly one"), "{err}");
}

#[test]
fn a_cut_off_code_block_is_unclosed() {
    let reply = format!("```cuda\n{}", &KERNEL[..200]);
    assert_eq!(parse_coder(&reply), Err(CoderReplyError::UnclosedCodeBlock));
}

#[test]
fn the_code_must_include_the_header_and_define_the_entry_point() {
    let no_entry = KERNEL.replace("kforge_forward", "forward");
    let err = parse_coder(&fenced("cuda", &no_entry)).unwrap_err();
    assert_eq!(
        err,
        CoderReplyError::Incomplete {
            missing_include: false,
            missing_entry_point: true
        }
    );
    assert!(err.to_string().contains("kforge_forward"), "{err}");

    // A declaration alone does not define it.
    let declared = "#include \"kforge.h\"\nextern \"C\" int kforge_forward(const kf_tensor *inputs, \
                    int n, const kf_tensor *params, int m, kf_tensor *outputs, int k, \
                    cudaStream_t stream);\n";
    assert!(matches!(
        parse_coder(&fenced("cuda", declared)),
        Err(CoderReplyError::Incomplete {
            missing_entry_point: true,
            ..
        })
    ));

    let no_include = KERNEL.replace("#include \"kforge.h\"", "#include <cuda_runtime.h>");
    let err = parse_coder(&fenced("cuda", &no_include)).unwrap_err();
    assert_eq!(
        err,
        CoderReplyError::Incomplete {
            missing_include: true,
            missing_entry_point: false
        }
    );
    assert!(err.to_string().contains("#include \"kforge.h\""), "{err}");

    // A commented-out include is no include.
    let commented = KERNEL.replace("#include \"kforge.h\"", "// #include \"kforge.h\"");
    assert!(parse_coder(&fenced("cuda", &commented)).is_err());

    let neither = no_include.replace("kforge_forward", "forward");
    let message = parse_coder(&fenced("cuda", &neither))
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("kforge.h") && message.contains("kforge_forward"),
        "{message}"
    );
}

const OPTIMIZE: &str = r#"{
  "bottleneck": {
    "diagnosis": "Latency-bound: three passes over each row with 1024-thread blocks keep too few loads in flight; DRAM is at 43% of peak and long-scoreboard stalls dominate.",
    "evidence": [
      {"metric": "dram__throughput.avg.pct_of_peak_sustained_elapsed", "value": "43.0%"},
      {"metric": "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "value": 33.9}
    ]
  },
  "prescriptions": [
    {"rank": 2, "edit": "Load x as float4 in all three passes", "rationale": "Four times fewer load instructions for the same bytes.", "prediction": "long scoreboard 33.9 -> <20 cycles, time -15%"},
    {"rank": 1, "edit": "Fuse sum and sum of squares into one pass with one float2 block reduction", "rationale": "Removes a pass over the row and two of the three barriers.", "prediction": "DRAM throughput 43% -> >60%, time -30%", "confidence": 0.7}
  ]
}"#;

fn optimize(text: &str) -> Result<JudgeVerdict, JudgeReplyError> {
    parse_judge(JudgeMode::Optimize, text)
}

fn problems(err: JudgeReplyError) -> Vec<String> {
    match err {
        JudgeReplyError::Invalid { problems } => problems,
        other => panic!("expected rule violations, got {other:?}"),
    }
}

#[test]
fn a_good_optimize_verdict_is_sorted_by_rank() {
    let JudgeVerdict::Optimize(verdict) = optimize(OPTIMIZE).unwrap() else {
        panic!("optimize mode gives an optimize verdict");
    };
    let ranks: Vec<u32> = verdict.prescriptions.iter().map(|p| p.rank).collect();
    assert_eq!(ranks, [1, 2]);
    // A bare number is taken as the value's text.
    assert_eq!(verdict.bottleneck.evidence[1].value, "33.9");
    assert_eq!(verdict.prescriptions[0].confidence, Some(0.7));
    let verdict = JudgeVerdict::Optimize(verdict);
    let prescriptions = verdict.prescriptions();
    assert_eq!(
        prescriptions[0].strategy,
        "Fuse sum and sum of squares into one pass with one float2 block reduction"
    );
    assert_eq!(prescriptions[0].prior, Some(0.7));
    assert_eq!(prescriptions[1].prior, None);
    let stored = serde_json::to_value(&verdict).unwrap();
    assert_eq!(stored["mode"], "optimize");
}

#[test]
fn a_json_fence_may_have_prose_around_it_but_bare_json_may_not() {
    let fenced_reply = format!("My analysis:\n```json\n{OPTIMIZE}\n```\nGood luck.");
    assert_eq!(
        optimize(&fenced_reply).unwrap(),
        optimize(OPTIMIZE).unwrap()
    );
    let untagged = format!("```\n{OPTIMIZE}\n```");
    assert!(optimize(&untagged).is_ok());

    let trailing = format!("{OPTIMIZE}\nI hope this helps!");
    let err = optimize(&trailing).unwrap_err();
    assert_eq!(err, JudgeReplyError::ProseAroundJson { position: "after" });
    assert!(err.to_string().contains("only the JSON object"), "{err}");
    let leading = format!("Here is the verdict: {OPTIMIZE}");
    assert_eq!(
        optimize(&leading).unwrap_err(),
        JudgeReplyError::ProseAroundJson { position: "before" }
    );
    assert_eq!(
        optimize("The kernel is memory-bound.").unwrap_err(),
        JudgeReplyError::NoJson
    );
    let two = format!("```json\n{OPTIMIZE}\n```\n```json\n{OPTIMIZE}\n```");
    assert_eq!(
        optimize(&two).unwrap_err(),
        JudgeReplyError::SeveralJsonBlocks { count: 2 }
    );
    assert_eq!(
        optimize(&format!("```json\n{}", &OPTIMIZE[..100])).unwrap_err(),
        JudgeReplyError::UnclosedJsonBlock
    );
}

#[test]
fn malformed_json_and_missing_fields_name_where() {
    let err = optimize(&OPTIMIZE[..OPTIMIZE.len() - 10]).unwrap_err();
    assert!(
        matches!(&err, JudgeReplyError::Syntax { message } if message.contains("ends early")),
        "{err:?}"
    );
    let no_rationale = OPTIMIZE.replace(
        r#""rationale": "Four times fewer load instructions for the same bytes.", "#,
        "",
    );
    let err = optimize(&no_rationale).unwrap_err();
    assert!(
        matches!(&err, JudgeReplyError::Schema { message } if message.contains("missing field `rationale`") && message.contains("line")),
        "{err:?}"
    );
    let no_bottleneck = r#"{"prescriptions": []}"#;
    assert!(
        optimize(no_bottleneck)
            .unwrap_err()
            .to_string()
            .contains("missing field `bottleneck`")
    );
    let extra = OPTIMIZE.replace(r#""confidence": 0.7"#, r#""confidense": 0.7"#);
    assert!(
        optimize(&extra)
            .unwrap_err()
            .to_string()
            .contains("unknown field `confidense`")
    );
    let negative_rank = OPTIMIZE.replace(r#""rank": 2"#, r#""rank": -2"#);
    assert!(matches!(
        optimize(&negative_rank).unwrap_err(),
        JudgeReplyError::Schema { .. }
    ));
}

#[test]
fn empty_prescriptions_are_refused() {
    let text = r#"{"bottleneck": {"diagnosis": "DRAM-bound", "evidence": [{"metric": "DRAM", "value": "91%"}]}, "prescriptions": []}"#;
    let problems = problems(optimize(text).unwrap_err());
    assert_eq!(
        problems,
        ["prescriptions is empty: give 1 to 5 ranked prescriptions"]
    );
}

#[test]
fn ranks_must_be_one_to_n_each_once() {
    let duplicated = OPTIMIZE.replace(r#""rank": 2"#, r#""rank": 1"#);
    let problems_found = problems(optimize(&duplicated).unwrap_err());
    assert_eq!(
        problems_found,
        ["the ranks are 1, 1: number the 2 prescriptions 1 to 2, each rank once"]
    );
    let gap = OPTIMIZE.replace(r#""rank": 2"#, r#""rank": 3"#);
    assert!(problems(optimize(&gap).unwrap_err())[0].contains("the ranks are 1, 3"));
}

#[test]
fn evidence_must_cite_something() {
    let start = OPTIMIZE.find(r#""evidence": ["#).unwrap();
    let end = start + OPTIMIZE[start..].find(']').unwrap() + 1;
    let no_evidence = format!("{}\"evidence\": []{}", &OPTIMIZE[..start], &OPTIMIZE[end..]);
    let found = problems(optimize(&no_evidence).unwrap_err());
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("bottleneck.evidence is empty"),
        "{found:?}"
    );
    let blank_metric = OPTIMIZE.replace(
        r#""metric": "dram__throughput.avg.pct_of_peak_sustained_elapsed""#,
        r#""metric": " ""#,
    );
    assert_eq!(
        problems(optimize(&blank_metric).unwrap_err()),
        ["bottleneck.evidence[0].metric is empty"]
    );
}

#[test]
fn every_rule_broken_is_reported_at_once() {
    let text = r#"{
      "bottleneck": {"diagnosis": "", "evidence": [{"metric": "DRAM", "value": "91%"}]},
      "prescriptions": [
        {"rank": 1, "edit": "Use shared memory", "rationale": "Faster", "prediction": "it gets faster", "confidence": 1.5},
        {"rank": 2, "edit": "", "rationale": "x", "prediction": "time -10%", "confidence": 0}
      ]
    }"#;
    let found = problems(optimize(text).unwrap_err());
    assert_eq!(
        found,
        [
            "bottleneck.diagnosis is empty",
            "prescriptions[0].prediction has no number: make it falsifiable (e.g. \"DRAM \
             throughput from 41% to >75%, time -40%\")",
            "prescriptions[0].confidence is 1.5: it must lie in (0, 1] (or be left out)",
            "prescriptions[1].edit is empty",
            "prescriptions[1].confidence is 0: it must lie in (0, 1] (or be left out)",
        ]
    );
    let message = optimize(text).unwrap_err().to_string();
    assert!(
        message.starts_with("the JSON breaks the rules: bottleneck.diagnosis is empty; "),
        "{message}"
    );
}

#[test]
fn at_most_five_prescriptions() {
    let one = r#"{"rank": R, "edit": "e", "rationale": "r", "prediction": "time -5%"}"#;
    let six: Vec<String> = (1..=6).map(|r| one.replace('R', &r.to_string())).collect();
    let text = format!(
        r#"{{"bottleneck": {{"diagnosis": "d", "evidence": [{{"metric": "m", "value": "1"}}]}}, "prescriptions": [{}]}}"#,
        six.join(",")
    );
    assert_eq!(
        problems(optimize(&text).unwrap_err()),
        ["prescriptions has 6 entries: give at most 5, the most promising"]
    );
}

#[test]
fn repair_verdicts_need_the_issue_and_the_fix() {
    let good = r#"{"critical_issue": "The second half of each block reads the even row.", "fix": "Use x + r * cols for row."}"#;
    let verdict = parse_judge(JudgeMode::Repair, good).unwrap();
    assert_eq!(verdict.mode(), JudgeMode::Repair);
    let prescriptions = verdict.prescriptions();
    assert_eq!(prescriptions.len(), 1);
    assert_eq!(
        prescriptions[0].strategy,
        "critical issue: The second half of each block reads the even row.\nminimal fix: Use x + \
         r * cols for row."
    );
    let with_evidence = r#"{"critical_issue": "i", "fix": "f", "evidence": [{"metric": "first mismatch", "value": "[1, 0]"}]}"#;
    assert!(parse_judge(JudgeMode::Repair, with_evidence).is_ok());

    let blank_fix = r#"{"critical_issue": "i", "fix": "  "}"#;
    assert_eq!(
        problems(parse_judge(JudgeMode::Repair, blank_fix).unwrap_err()),
        ["fix is empty"]
    );
    assert!(
        parse_judge(JudgeMode::Repair, r#"{"critical_issue": "i"}"#)
            .unwrap_err()
            .to_string()
            .contains("missing field `fix`")
    );
    // An optimize verdict is not a repair verdict.
    assert!(
        parse_judge(JudgeMode::Repair, OPTIMIZE)
            .unwrap_err()
            .to_string()
            .contains("unknown field `bottleneck`")
    );
}
