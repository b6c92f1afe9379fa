//! Tokens a call used and what it cost. Providers count differently (Anthropic's `input_tokens`
//! leaves out cached ones, OpenAI's `prompt_tokens` includes them); [`Usage`] holds one meaning
//! for every provider, written on each field.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Tokens of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Every prompt token, cached and cache-written ones included.
    pub input_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache (billed below the input rate).
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the provider's cache (Anthropic bills them above the input rate).
    pub cache_write_input_tokens: u64,
    /// Every generated token, reasoning included.
    pub output_tokens: u64,
    /// Generated tokens spent on hidden reasoning, where the provider reports them.
    pub reasoning_tokens: u64,
}

impl Usage {
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// What a call cost in US dollars at list price, or why that is not known. A model missing from
/// the price table is `Unknown`, never zero, so a budget never silently ignores it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cost {
    Known(f64),
    Unknown(CostUnknown),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostUnknown {
    /// The model has no entry in the price table.
    NotInPriceTable,
    /// The server's reply carried no token counts.
    NoUsageReported,
}

impl Cost {
    pub fn usd(&self) -> Option<f64> {
        match self {
            Cost::Known(usd) => Some(*usd),
            Cost::Unknown(_) => None,
        }
    }
}

impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cost::Known(usd) => write!(f, "${usd:.6}"),
            Cost::Unknown(CostUnknown::NotInPriceTable) => {
                f.write_str("unknown (the model is not in the price table; add it to a file named by llm.price_table)")
            }
            Cost::Unknown(CostUnknown::NoUsageReported) => {
                f.write_str("unknown (the server reported no token counts)")
            }
        }
    }
}

/// A known cost is its number of dollars; an unknown one is the string `"unknown"`.
impl Serialize for Cost {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Cost::Known(usd) => serializer.serialize_f64(*usd),
            Cost::Unknown(_) => serializer.serialize_str("unknown"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_shows_and_serializes() {
        assert_eq!(Cost::Known(0.0123).to_string(), "$0.012300");
        assert!(
            Cost::Unknown(CostUnknown::NotInPriceTable)
                .to_string()
                .contains("not in the price table")
        );
        assert_eq!(serde_json::json!(Cost::Known(1.5)), serde_json::json!(1.5));
        assert_eq!(
            serde_json::json!(Cost::Unknown(CostUnknown::NoUsageReported)),
            serde_json::json!("unknown")
        );
        assert_eq!(Cost::Unknown(CostUnknown::NotInPriceTable).usd(), None);
    }
}
