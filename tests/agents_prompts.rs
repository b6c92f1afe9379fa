//! The prompts the Coder and the Judge receive, pinned for one realistic run: LayerNorm over
//! 8192×16384 fp32 on an H200, with nodes that are correct, incorrect, crash and do not compile.

mod agents_support;

use agents_support::{
    Fixtures, children_of_correct, history, path_to_correct, path_to_smem_row, show, tried,
};
use kforge::agents::{
    CoderReplyError, CoderTask, JudgeReplyError, JudgeTask, JudgedNode, Profile, Prompts,
    coder_request, coder_retry_request, judge_request, judge_retry_request,
};
use kforge::llm::{ChatRequest, Role, Sampling};
use kforge::search::TriedResult;

fn prompts() -> Prompts {
    Prompts::shipped().unwrap()
}

/// A prompt never names a folder of the machine it was made on.
fn assert_no_machine_paths(request: &ChatRequest) {
    let text = show(request);
    for marker in ["/home/", "/root", "/tmp/", "/work/", "compile-cache"] {
        assert!(!text.contains(marker), "prompt contains {marker}:\n{text}");
    }
}

fn snapshot(name: &str, request: &ChatRequest) {
    assert_no_machine_paths(request);
    insta::assert_snapshot!(name, show(request));
}

#[test]
fn coder_generate_follows_the_judges_approach_and_lists_first_kernels_tried() {
    let f = Fixtures::load();
    let siblings = vec![tried(
        1,
        "One block of 1024 threads per row; mean and variance from block-wide warp-shuffle \
         reductions, then a third pass writes the output",
        TriedResult::Correct {
            speedup: 0.7696,
            fraction_of_sol: Some(0.4791),
        },
        Some(1.0412),
    )];
    let task = CoderTask::Generate {
        prescription: Some(
            "One warp per row with the row held in registers (16384 floats = 512 per lane as \
             128 float4): one DRAM read, warp-shuffle reductions, no __syncthreads",
        ),
        history: history(&siblings, &[]),
    };
    let request = coder_request(&prompts(), &f.run(), &task, &Sampling::default()).unwrap();
    snapshot("coder_generate", &request);
}

#[test]
fn coder_generate_in_a_compile_only_run_says_there_is_no_gpu() {
    let f = Fixtures::load();
    let task = CoderTask::Generate {
        prescription: None,
        history: history(&[], &[]),
    };
    let request = coder_request(
        &prompts(),
        &f.compile_only_run(),
        &task,
        &Sampling::default(),
    )
    .unwrap();
    snapshot("coder_generate_compile_only", &request);
}

#[test]
fn coder_repair_shows_the_correctness_diff_and_the_judges_fix() {
    let f = Fixtures::load();
    let ancestors = vec![tried(
        5,
        "Two rows per block, one per half of the block, to halve the number of blocks",
        TriedResult::Failed {
            reason: f.two_rows.summary.clone(),
        },
        None,
    )];
    let task = CoderTask::Repair {
        failed: f.two_rows(),
        fix: Some(
            "critical issue: in layernorm_two_rows the row pointer ignores the half: `row = x + \
             2 * blockIdx.x * cols` makes the second half normalize the even row and write it \
             to the odd row\nminimal fix: compute `row = x + r * cols` with the r already used \
             for `out`",
        ),
        history: history(&[], &ancestors),
    };
    let request = coder_request(&prompts(), &f.run(), &task, &Sampling::default()).unwrap();
    snapshot("coder_repair_incorrect", &request);
}

#[test]
fn coder_repair_of_a_compile_error_quotes_the_log_without_paths() {
    let f = Fixtures::load();
    let ancestors = vec![tried(
        6,
        "Load x, weight and bias as float4 in all three passes",
        TriedResult::Failed {
            reason: f.float4.summary.clone(),
        },
        None,
    )];
    let task = CoderTask::Repair {
        failed: f.float4(),
        fix: None,
        history: history(&[], &ancestors),
    };
    let request = coder_request(&prompts(), &f.run(), &task, &Sampling::default()).unwrap();
    let user = &request.messages[0].content;
    assert!(user.contains("candidate.cu(40): error: no operator \"-\" matches these operands"));
    snapshot("coder_repair_compile_error", &request);
}

#[test]
fn coder_optimize_applies_one_prescription_with_the_metrics_in_view() {
    let f = Fixtures::load();
    let (siblings, ancestors) = (children_of_correct(), path_to_correct());
    let task = CoderTask::Optimize {
        parent: f.correct(),
        prescription: "Fuse the sum and the sum of squares into the first pass (one block \
                       reduction of a float2 instead of two passes and two reductions)",
        history: history(&siblings, &ancestors),
    };
    let request = coder_request(&prompts(), &f.run(), &task, &Sampling::default()).unwrap();
    snapshot("coder_optimize", &request);
}

#[test]
fn judge_optimize_sees_metrics_diagnosis_and_what_not_to_repeat() {
    let f = Fixtures::load();
    let (siblings, ancestors) = (children_of_correct(), path_to_correct());
    let task = JudgeTask::Optimize {
        node: JudgedNode::Kernel(f.correct()),
        history: history(&siblings, &ancestors),
    };
    let request = judge_request(&prompts(), &f.run(), &task, &Sampling::default()).unwrap();
    let user = &request.messages[0].content;
    assert!(
        user.contains(f.correct_ncu.trim()),
        "the ncu view is quoted whole"
    );
    assert!(user.contains("Welford's single-pass mean and variance\n  → being tried right now"));
    snapshot("judge_optimize", &request);
}

#[test]
fn judge_optimize_at_the_root_prescribes_for_the_reference() {
    let f = Fixtures::load();
    let task = JudgeTask::Optimize {
        node: JudgedNode::Reference {
            profile: Profile::NotProfiled {
                reason: "ncu is not installed on this machine",
            },
        },
        history: history(&[], &[]),
    };
    let request = judge_request(&prompts(), &f.run(), &task, &Sampling::default()).unwrap();
    snapshot("judge_optimize_reference", &request);
}

#[test]
fn judge_repair_reads_the_runtime_failure() {
    let f = Fixtures::load();
    let ancestors = path_to_smem_row();
    let task = JudgeTask::Repair {
        failed: f.smem_row(),
        history: history(&[], &ancestors),
    };
    let request = judge_request(&prompts(), &f.run(), &task, &Sampling::default()).unwrap();
    snapshot("judge_repair_runtime_error", &request);
}

#[test]
fn retries_show_the_bad_reply_and_quote_the_error() {
    let f = Fixtures::load();
    let coder = coder_request(
        &prompts(),
        &f.run(),
        &CoderTask::Generate {
            prescription: None,
            history: history(&[], &[]),
        },
        &Sampling::default(),
    )
    .unwrap();
    let bad = "Here is the kernel:\n```python\nprint('hi')\n```\n";
    let retry = coder_retry_request(
        &prompts(),
        &coder,
        bad,
        &CoderReplyError::NoCodeBlock {
            other_tags: vec!["python".into()],
        },
    )
    .unwrap();
    assert_eq!(retry.messages.len(), 3);
    assert_eq!(retry.messages[0], coder.messages[0]);
    assert_eq!(retry.messages[1].role, Role::Assistant);
    assert_eq!(retry.messages[1].content, bad);
    assert_eq!(retry.system, coder.system);
    insta::assert_snapshot!("coder_retry", &retry.messages[2].content);

    let judge = judge_request(
        &prompts(),
        &f.run(),
        &JudgeTask::Repair {
            failed: f.smem_row(),
            history: history(&[], &[]),
        },
        &Sampling::default(),
    )
    .unwrap();
    let retry = judge_retry_request(
        &prompts(),
        &judge,
        "",
        &JudgeReplyError::Invalid {
            problems: vec!["fix is empty".into()],
        },
    )
    .unwrap();
    // Providers refuse empty turns, so an empty reply is shown as such.
    assert_eq!(retry.messages[1].content, "(an empty reply)");
    insta::assert_snapshot!("judge_retry", &retry.messages[2].content);
}

#[test]
fn a_users_prompts_folder_replaces_one_template() {
    let f = Fixtures::load();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("coder_optimize.txt"),
        "Edit: {{prescription}}\n```cuda\n{{code}}\n```\n",
    )
    .unwrap();
    let prompts = Prompts::load(Some(dir.path())).unwrap();
    let (siblings, ancestors) = (children_of_correct(), path_to_correct());
    let task = CoderTask::Optimize {
        parent: f.correct(),
        prescription: "Unroll the loads by 4",
        history: history(&siblings, &ancestors),
    };
    let request = coder_request(&prompts, &f.run(), &task, &Sampling::default()).unwrap();
    assert_eq!(
        request.messages[0].content,
        format!(
            "Edit: Unroll the loads by 4\n```cuda\n{}\n```",
            f.correct_code.trim_end()
        )
    );
    // The system prompt is still the shipped one.
    assert_eq!(
        request.system,
        Prompts::shipped()
            .unwrap()
            .template(kforge::agents::TemplateKind::CoderSystem)
            .render(&Default::default())
            .ok()
            .map(|s| s.trim().to_string())
    );
}

#[test]
fn sampling_settings_travel_with_the_request() {
    let f = Fixtures::load();
    let sampling = Sampling {
        temperature: Some(0.2),
        max_output_tokens: Some(16000),
        reasoning_effort: None,
    };
    let request = coder_request(
        &prompts(),
        &f.run(),
        &CoderTask::Generate {
            prescription: None,
            history: history(&[], &[]),
        },
        &sampling,
    )
    .unwrap();
    assert_eq!(request.sampling, sampling);
}
