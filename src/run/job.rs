//! One expansion as a task: load the parent's records, ask the Judge (unless the search already
//! assigned a prescription), wait for the loop to apply it, ask the Coder, evaluate (or reuse an
//! evaluation already on disk), and report. Every file of the node is written here; every LLM
//! call is logged, stored and paid for whether the step worked or not.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::models::{CallSite, CoderStep, NodeRef};
use super::records::{self, NodeRecord, RunEvent, node_dir, profile_view};
use super::{JobMsg, JobResult, Shared, gate::call_spend};
use crate::agents::{
    Candidate, CoderTask, Exchange, History, JudgeTask, JudgedNode, ask_coder, ask_judge,
};
use crate::eval::{CandidateResult, Status};
use crate::llm::{Agent, LlmClient};
use crate::search::{Evaluation, Job, JobKind, NodeId, Spend};

/// How a job's time was spent.
#[derive(Debug, Default)]
struct JobTimes {
    llm: Duration,
    evaluating: Duration,
    waiting: Duration,
}

/// One expansion, start to finish. Never panics the loop: every failure becomes an abandoned
/// expansion with its reason.
pub(super) async fn run_job(
    shared: Arc<Shared>,
    job: Job,
    tx: mpsc::UnboundedSender<JobMsg>,
    mut spent: Spend,
) {
    let started = Instant::now();
    let mut times = JobTimes::default();
    let child = job.child;
    let outcome = expand(&shared, &job, &tx, &mut spent, &mut times).await;
    let elapsed = shared.clock.now().saturating_sub(job.issued_at);
    let cost = Spend {
        seconds: elapsed.as_secs_f64(),
        ..spent
    };
    let result = match outcome {
        Ok(evaluation) => JobResult::Completed { evaluation, cost },
        Err(reason) => JobResult::Abandoned { reason, cost },
    };
    let overhead = started
        .elapsed()
        .saturating_sub(times.llm + times.evaluating + times.waiting);
    // The loop outlives its jobs; if it is gone the run is ending anyway.
    let _ = tx.send(JobMsg::Finished {
        child,
        result,
        overhead,
    });
}

/// The calls of one agent step: logged, stored and paid for, whether the step worked or not.
fn account(
    shared: &Shared,
    tx: &mpsc::UnboundedSender<JobMsg>,
    child: NodeId,
    agent: Agent,
    client: &dyn LlmClient,
    exchanges: &[Exchange],
    spent: &mut Spend,
) -> Result<(), String> {
    let dir = node_dir(&shared.root, child);
    let numbered_from = std::fs::read_dir(dir.join("llm"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with(agent.name()))
                .count()
        })
        .unwrap_or(0);
    records::write_exchanges(&dir, agent.name(), numbered_from + 1, exchanges)
        .map_err(|e| e.to_string())?;
    for exchange in exchanges {
        let spend = call_spend(client.spec(), &exchange.response, None);
        *spent = spent.plus(spend);
        let _ = tx.send(JobMsg::Log(RunEvent::LlmCall {
            node: child,
            agent: agent.name().into(),
            model: exchange.response.model.clone(),
            tokens: exchange.response.usage.map(|u| u.total_tokens()),
            dollars: exchange.response.cost.usd(),
            seconds: exchange.response.latency.as_secs_f64(),
            rejected: exchange.rejected.clone(),
            spend,
        }));
    }
    Ok(())
}

/// Awaits one agent step, timing it and accounting for its calls whether it worked or not.
#[allow(clippy::too_many_arguments)]
async fn agent_step<T>(
    shared: &Shared,
    tx: &mpsc::UnboundedSender<JobMsg>,
    child: NodeId,
    agent: Agent,
    client: &dyn LlmClient,
    spent: &mut Spend,
    times: &mut JobTimes,
    step: impl std::future::Future<Output = Result<crate::agents::Answer<T>, crate::agents::AgentError>>,
) -> Result<T, String> {
    let asked = Instant::now();
    let answer = step.await;
    times.llm += asked.elapsed();
    let exchanges = match &answer {
        Ok(answer) => &answer.exchanges,
        Err(error) => error.exchanges(),
    };
    account(shared, tx, child, agent, client, exchanges, spent)?;
    answer.map(|answer| answer.value).map_err(|e| e.to_string())
}

async fn expand(
    shared: &Shared,
    job: &Job,
    tx: &mpsc::UnboundedSender<JobMsg>,
    spent: &mut Spend,
    times: &mut JobTimes,
) -> Result<Evaluation, String> {
    let dir = node_dir(&shared.root, job.child);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the node folder: {e}"))?;
    let parent = if job.parent == NodeId::ROOT {
        None
    } else {
        Some(NodeRecord::load(&shared.root, job.parent)?)
    };
    let parent_ref = match &parent {
        None => NodeRef::Reference,
        Some(record) => NodeRef::Kernel { code: &record.code },
    };
    let candidate = parent.as_ref().map(|record| Candidate {
        code: &record.code,
        result: &record.result,
        profile: record.profile(),
    });
    let run = shared.context();
    let history = History::of(job);
    let repair = matches!(job.kind, JobKind::Repair { .. });

    let assigned = match &job.prescription {
        Some(assigned) => assigned.clone(),
        None => {
            let client = shared
                .client(
                    Agent::Judge,
                    &CallSite::Judge {
                        node: parent_ref,
                        repair,
                    },
                )
                .map_err(|e| e.to_string())?;
            let task = match (repair, candidate) {
                (true, Some(failed)) => JudgeTask::Repair { failed, history },
                (false, Some(kernel)) => JudgeTask::Optimize {
                    node: JudgedNode::Kernel(kernel),
                    history,
                },
                (false, None) => JudgeTask::Optimize {
                    node: JudgedNode::Reference {
                        profile: profile_view(&shared.root_profile),
                    },
                    history,
                },
                (true, None) => return Err("the reference cannot be repaired".into()),
            };
            let verdict = agent_step(
                shared,
                tx,
                job.child,
                Agent::Judge,
                client.as_ref(),
                spent,
                times,
                ask_judge(
                    client.as_ref(),
                    &shared.prompts,
                    &run,
                    &task,
                    &shared.judge_sampling,
                ),
            )
            .await?;
            records::write_json(&dir, "judge.json", &verdict).map_err(|e| e.to_string())?;
            let (reply, answer) = oneshot::channel();
            let waiting = Instant::now();
            tx.send(JobMsg::Judged {
                child: job.child,
                prescriptions: verdict.prescriptions(),
                reply,
            })
            .map_err(|_| "the run is ending".to_string())?;
            let assigned = answer
                .await
                .map_err(|_| "the run is ending".to_string())??;
            times.waiting += waiting.elapsed();
            assigned
        }
    };

    let step = if repair {
        CoderStep::Repair
    } else {
        CoderStep::Prescription {
            index: assigned.index.unwrap_or(0),
        }
    };
    let client = shared
        .client(
            Agent::Coder,
            &CallSite::Coder {
                parent: parent_ref,
                step,
            },
        )
        .map_err(|e| e.to_string())?;
    let task = match (repair, candidate) {
        (true, Some(failed)) => CoderTask::Repair {
            failed,
            fix: Some(&assigned.strategy),
            history,
        },
        (false, Some(parent)) => CoderTask::Optimize {
            parent,
            prescription: &assigned.strategy,
            history,
        },
        (false, None) => CoderTask::Generate {
            prescription: Some(&assigned.strategy),
            history,
        },
        (true, None) => return Err("the reference cannot be repaired".into()),
    };
    let code = agent_step(
        shared,
        tx,
        job.child,
        Agent::Coder,
        client.as_ref(),
        spent,
        times,
        ask_coder(
            client.as_ref(),
            &shared.prompts,
            &run,
            &task,
            &shared.coder_sampling,
        ),
    )
    .await?;

    let evaluating = Instant::now();
    let result = evaluate_node(shared, &dir, &code).await?;
    times.evaluating += evaluating.elapsed();
    let _ = tx.send(JobMsg::Log(RunEvent::Evaluated {
        node: job.child,
        status: result.status.as_str().into(),
        summary: result.summary.clone(),
    }));
    Ok(search_evaluation(&result))
}

/// Evaluates `code` in `dir`, or takes the evaluation already there for the same code (a job
/// of a killed run that got that far).
async fn evaluate_node(shared: &Shared, dir: &Path, code: &str) -> Result<CandidateResult, String> {
    let kept = std::fs::read_to_string(dir.join("kernel.cu")).ok();
    if kept.as_deref() == Some(code)
        && let Ok(text) = std::fs::read_to_string(dir.join("eval.json"))
        && let Ok(result) = serde_json::from_str::<CandidateResult>(&text)
    {
        return Ok(result);
    }
    let _ = std::fs::remove_file(dir.join("eval.json"));
    records::write(dir, "kernel.cu", code).map_err(|e| e.to_string())?;
    let evaluated = shared
        .evaluator
        .evaluate(code, dir)
        .await
        .map_err(|e| format!("the evaluation could not run: {e}"))?;
    let mut result = evaluated.result;
    records::write(dir, "compile.log", &result.compile.log).map_err(|e| e.to_string())?;
    if let Some(profile) = &evaluated.profile {
        records::write_json(dir, "ncu.json", profile).map_err(|e| e.to_string())?;
        result.ncu = serde_json::to_value(profile.summary()).ok();
    }
    // Written last: its presence means the evaluation is complete.
    records::write_json(dir, "eval.json", &result).map_err(|e| e.to_string())?;
    Ok(result)
}

/// The evaluation as the search takes it.
pub fn search_evaluation(result: &CandidateResult) -> Evaluation {
    match (result.status, &result.speedup) {
        (Status::Correct, Some(speedup)) => Evaluation::Correct {
            speedup: speedup.vs_reference,
            fraction_of_sol: result.fraction_of_speed_of_light,
        },
        // A run always times; a correct result without numbers is a measurement that failed.
        (Status::Correct, None) => Evaluation::Failed {
            reason: "correct, but the timing produced no numbers".into(),
        },
        (Status::Compiled, _) => Evaluation::Unverified {
            reason: super::evaluator::COMPILE_ONLY.into(),
        },
        _ => Evaluation::Failed {
            reason: result.summary.clone(),
        },
    }
}
