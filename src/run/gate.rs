//! The dollar and token budgets, enforced per LLM call so they hold exactly. Before a call is
//! sent, its worst case is known: its prompt cannot be more tokens than it has bytes (every
//! byte-level BPE token covers at least one byte), and its reply is capped by
//! `max_output_tokens`. The call goes out only if what was spent, plus the worst case of every
//! call in flight, plus its own worst case fits the budget; afterwards its reservation is
//! replaced by what it actually cost. A refused call ends its expansion and stops the run from
//! starting new ones, so the budget is never passed, not even by calls running side by side.
//! (A few tokens per turn are added for the chat template's role markers.)

use std::sync::{Arc, Mutex, PoisonError};

use crate::llm::{
    ChatRequest, ChatResponse, Cost, LlmClient, LlmError, LlmFuture, ModelSpec, PriceTable,
    ProviderKind, Usage,
};
use crate::search::{Budget, Dollars, DoneReason, Spend};

/// Tokens a chat template adds around each turn (role markers; OpenAI documents 3 to 4), on
/// top of the turn's text.
const TURN_OVERHEAD_TOKENS: usize = 8;

/// The reply cap used for the worst case when a budget is set and the agent has none.
pub const BUDGETED_MAX_OUTPUT_TOKENS: u32 = 32_000;

#[derive(Debug, Default)]
struct GateState {
    committed: Spend,
    reserved_nanos: u64,
    reserved_tokens: u64,
    refused: Option<DoneReason>,
}

/// Shared by every call of a run.
pub struct BudgetGate {
    max_dollars: Option<Dollars>,
    max_tokens: Option<u64>,
    prices: Arc<PriceTable>,
    state: Mutex<GateState>,
}

/// A call's worst case, held while it runs.
#[derive(Debug, Clone, Copy)]
struct Reservation {
    nanos: u64,
    tokens: u64,
}

impl BudgetGate {
    /// A gate for `budget`, with `spent` already used (a resumed run).
    pub fn new(budget: &Budget, prices: Arc<PriceTable>, spent: Spend) -> BudgetGate {
        BudgetGate {
            max_dollars: budget.max_dollars,
            max_tokens: budget.max_tokens,
            prices,
            state: Mutex::new(GateState {
                committed: spent,
                ..GateState::default()
            }),
        }
    }

    /// The budget a refused call ran into, if one did.
    pub fn refused(&self) -> Option<DoneReason> {
        self.lock().refused
    }

    /// Everything the calls of this process cost, with what the run had spent before.
    pub fn committed(&self) -> Spend {
        self.lock().committed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn worst_case(&self, spec: &ModelSpec, request: &ChatRequest) -> Result<Reservation, LlmError> {
        let turns = request.messages.len() + usize::from(request.system.is_some());
        let prompt_bytes = request.system.as_deref().map_or(0, str::len)
            + request
                .messages
                .iter()
                .map(|m| m.content.len())
                .sum::<usize>()
            + turns * TURN_OVERHEAD_TOKENS;
        let output = request
            .sampling
            .max_output_tokens
            .unwrap_or(BUDGETED_MAX_OUTPUT_TOKENS);
        let usage = Usage {
            input_tokens: prompt_bytes as u64,
            output_tokens: u64::from(output),
            ..Usage::default()
        };
        let nanos = match (self.max_dollars, scripted(spec)) {
            (None, _) | (_, true) => 0,
            (Some(_), false) => match self.prices.cost(&[spec.model.as_str()], Some(&usage)) {
                Cost::Known(usd) => Dollars::from_dollars(usd).map_or(u64::MAX, Dollars::nanos),
                Cost::Unknown(_) => {
                    return Err(LlmError::BadSetting {
                        key: "llm.prices",
                        reason: format!(
                            "no price is known for {}, so the dollar budget cannot be kept; add \
                             the model to a price table or run without --max-dollars",
                            spec.model
                        ),
                    });
                }
            },
        };
        Ok(Reservation {
            nanos,
            tokens: if scripted(spec) {
                0
            } else {
                usage.total_tokens()
            },
        })
    }

    fn reserve(&self, spec: &ModelSpec, request: &ChatRequest) -> Result<Reservation, LlmError> {
        let worst = self.worst_case(spec, request)?;
        let mut state = self.lock();
        if let Some(reason) = state.refused {
            return Err(over_budget(reason));
        }
        let dollars_after = state
            .committed
            .dollars
            .nanos()
            .saturating_add(state.reserved_nanos)
            .saturating_add(worst.nanos);
        let tokens_after = state
            .committed
            .tokens
            .saturating_add(state.reserved_tokens)
            .saturating_add(worst.tokens);
        let refused = if self
            .max_dollars
            .is_some_and(|max| dollars_after > max.nanos())
        {
            Some(DoneReason::DollarBudget)
        } else if self.max_tokens.is_some_and(|max| tokens_after > max) {
            Some(DoneReason::TokenBudget)
        } else {
            None
        };
        if let Some(reason) = refused {
            state.refused = Some(reason);
            return Err(over_budget(reason));
        }
        state.reserved_nanos += worst.nanos;
        state.reserved_tokens += worst.tokens;
        Ok(worst)
    }

    fn settle(&self, reservation: Reservation, spent: Option<Spend>) {
        let mut state = self.lock();
        state.reserved_nanos -= reservation.nanos;
        state.reserved_tokens -= reservation.tokens;
        if let Some(spent) = spent {
            state.committed = state.committed.plus(spent);
        }
    }

    /// What one answered call cost, as the budgets count it: the bill and tokens reported, or
    /// the worst case when a paid model reported no usage (never a silent zero).
    fn spend_of(&self, spec: &ModelSpec, response: &ChatResponse, worst: Reservation) -> Spend {
        call_spend(spec, response, Some((worst.nanos, worst.tokens)))
    }
}

/// A scripted session's client: no model is called, nothing is paid.
fn scripted(spec: &ModelSpec) -> bool {
    spec.provider == ProviderKind::Replay
}

/// What a call cost for the budgets; `worst` (nanodollars, tokens) stands in for a paid call
/// that reported no usage.
pub fn call_spend(spec: &ModelSpec, response: &ChatResponse, worst: Option<(u64, u64)>) -> Spend {
    if scripted(spec) {
        return Spend::ZERO;
    }
    let (worst_nanos, worst_tokens) = worst.unwrap_or((0, 0));
    let tokens = response
        .usage
        .map_or(worst_tokens, |usage| usage.total_tokens());
    let dollars = match response.cost {
        Cost::Known(usd) => Dollars::from_dollars(usd).unwrap_or(Dollars::from_nanos(worst_nanos)),
        Cost::Unknown(_) => Dollars::from_nanos(worst_nanos),
    };
    Spend {
        dollars,
        tokens,
        seconds: 0.0,
    }
}

fn over_budget(reason: DoneReason) -> LlmError {
    LlmError::BadSetting {
        key: "budget",
        reason: format!(
            "{reason}: the next call could pass it, so it was not sent (raise the budget and \
             resume the run to go on)"
        ),
    }
}

/// A client behind the gate.
pub struct GatedClient {
    inner: Arc<dyn LlmClient>,
    gate: Arc<BudgetGate>,
}

impl GatedClient {
    pub fn new(inner: Arc<dyn LlmClient>, gate: Arc<BudgetGate>) -> GatedClient {
        GatedClient { inner, gate }
    }
}

impl LlmClient for GatedClient {
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> LlmFuture<'a> {
        Box::pin(async move {
            let spec = self.inner.spec();
            let reservation = self.gate.reserve(spec, request)?;
            let answer = self.inner.complete(request).await;
            let spent = answer
                .as_ref()
                .ok()
                .map(|response| self.gate.spend_of(spec, response, reservation));
            self.gate.settle(reservation, spent);
            answer
        })
    }

    fn spec(&self) -> &ModelSpec {
        self.inner.spec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Message, ScriptedClient, ScriptedReply};

    fn request(bytes: usize, max_output: u32) -> ChatRequest {
        ChatRequest {
            system: None,
            messages: vec![Message::user("x".repeat(bytes))],
            sampling: crate::llm::Sampling {
                max_output_tokens: Some(max_output),
                ..Default::default()
            },
        }
    }

    #[tokio::test]
    async fn a_call_that_could_pass_the_token_budget_is_never_sent() {
        let budget = Budget {
            max_tokens: Some(1000),
            ..Budget::default()
        };
        let gate = Arc::new(BudgetGate::new(&budget, PriceTable::shipped(), Spend::ZERO));
        let usage = Usage {
            input_tokens: 100,
            output_tokens: 50,
            ..Usage::default()
        };
        let inner = Arc::new(ScriptedClient::new(
            ModelSpec::parse("openai:gpt-4o").unwrap(),
            (0..4).map(|_| Ok(ScriptedReply::text("ok").with_usage(usage))),
        ));
        let client = GatedClient::new(inner.clone(), gate.clone());
        // Worst case 300 + 8 + 200 = 508 each; each call really costs 150.
        client.complete(&request(300, 200)).await.unwrap();
        client.complete(&request(300, 200)).await.unwrap();
        assert_eq!(gate.committed().tokens, 300);
        // 300 spent + 508 fits.
        client.complete(&request(300, 200)).await.unwrap();
        assert_eq!(gate.committed().tokens, 450);
        // 450 spent + 608 does not.
        let refused = client.complete(&request(400, 200)).await.unwrap_err();
        assert!(refused.to_string().contains("token budget"), "{refused}");
        assert_eq!(inner.requests().len(), 3);
        assert_eq!(gate.refused(), Some(DoneReason::TokenBudget));
        // Once refused, nothing more is sent.
        assert!(client.complete(&request(1, 1)).await.is_err());
        assert!(gate.committed().tokens <= 1000);
    }

    #[tokio::test]
    async fn a_dollar_budget_needs_a_known_price() {
        let budget = Budget {
            max_dollars: Dollars::from_dollars(1.0),
            ..Budget::default()
        };
        let gate = Arc::new(BudgetGate::new(&budget, PriceTable::shipped(), Spend::ZERO));
        let inner = Arc::new(ScriptedClient::replying(
            ModelSpec::parse("openai-compat:http://h:1/v1#no-such-model").unwrap(),
            ["ok"],
        ));
        let err = GatedClient::new(inner, gate)
            .complete(&request(10, 10))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no price is known"), "{err}");
    }
}
