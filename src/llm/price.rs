//! List prices per model, from the TOML table shipped in the binary (`src/llm/prices.toml`, which
//! documents the format) plus an optional user file (`llm.price_table`) whose entries replace or
//! add to it. A model found in neither has cost [`Cost::Unknown`], never zero.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use regex::Regex;
use serde::Deserialize;

use crate::config::LlmSettings;

use super::LlmError;
use super::usage::{Cost, CostUnknown, Usage};

const SHIPPED: &str = include_str!("prices.toml");
const SHIPPED_PATH: &str = "src/llm/prices.toml";

/// One model's prices in US dollars per million tokens.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Whose price this is (the model's maker or the host that serves it).
    pub vendor: String,
    /// When the price was read from the vendor's price page.
    pub date: toml::value::Datetime,
    pub input: f64,
    /// Prompt-cache reads; absent means billed at `input`.
    pub cached_input: Option<f64>,
    /// Prompt-cache writes; absent means billed at `input`.
    pub cache_write: Option<f64>,
    pub output: f64,
    #[serde(default)]
    pub aliases: Vec<String>,
}

impl ModelPrice {
    /// Dollars for `usage`.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_input_tokens;
        let written = usage.cache_write_input_tokens;
        let plain = usage
            .input_tokens
            .saturating_sub(cached)
            .saturating_sub(written);
        let dollars = plain as f64 * self.input
            + cached as f64 * self.cached_input.unwrap_or(self.input)
            + written as f64 * self.cache_write.unwrap_or(self.input)
            + usage.output_tokens as f64 * self.output;
        dollars / 1e6
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    models: BTreeMap<String, ModelPrice>,
}

/// Prices by model name and alias.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    entries: BTreeMap<String, ModelPrice>,
    /// Lower-case name or alias → key of `entries`.
    index: HashMap<String, String>,
}

impl PriceTable {
    /// The table shipped in the binary.
    pub fn shipped() -> Arc<PriceTable> {
        static SHIPPED_TABLE: OnceLock<Arc<PriceTable>> = OnceLock::new();
        SHIPPED_TABLE
            .get_or_init(|| {
                // The unit test `shipped_table_parses` parses this same embedded text, so a
                // build whose tests passed cannot fail here.
                let table = PriceTable::from_toml(SHIPPED, Path::new(SHIPPED_PATH))
                    .expect("the shipped price table parses (checked by a unit test)");
                Arc::new(table)
            })
            .clone()
    }

    /// The shipped table with the user's file (`llm.price_table`) laid over it.
    pub fn load(llm: &LlmSettings) -> Result<Arc<PriceTable>, LlmError> {
        let Some(path) = &llm.price_table else {
            return Ok(PriceTable::shipped());
        };
        let text = std::fs::read_to_string(path).map_err(|e| LlmError::PriceTable {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        let mut table = (*PriceTable::shipped()).clone();
        table.overlay(PriceTable::from_toml(&text, path)?);
        Ok(Arc::new(table))
    }

    pub fn from_toml(text: &str, origin: &Path) -> Result<PriceTable, LlmError> {
        let bad = |detail: String| LlmError::PriceTable {
            path: PathBuf::from(origin),
            detail,
        };
        let file: PriceFile = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        let mut table = PriceTable::default();
        for (name, price) in file.models {
            let rates = [
                Some(price.input),
                Some(price.output),
                price.cached_input,
                price.cache_write,
            ];
            if rates
                .into_iter()
                .flatten()
                .any(|r| !r.is_finite() || r < 0.0)
            {
                return Err(bad(format!(
                    "model `{name}` has a negative or non-finite price"
                )));
            }
            table.insert(name, price);
        }
        Ok(table)
    }

    fn insert(&mut self, name: String, price: ModelPrice) {
        let key = name.to_lowercase();
        if let Some(old) = self.entries.remove(&key) {
            for alias in old.aliases {
                self.index.remove(&alias.to_lowercase());
            }
        }
        self.index.insert(key.clone(), key.clone());
        for alias in &price.aliases {
            self.index.insert(alias.to_lowercase(), key.clone());
        }
        self.entries.insert(key, price);
    }

    /// Entries of `other` replace same-named entries here and add the rest.
    pub fn overlay(&mut self, other: PriceTable) {
        for (name, price) in other.entries {
            self.insert(name, price);
        }
    }

    /// The price of `model` as an API names it (see the matching rules in prices.toml).
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        static DATE_SUFFIX: OnceLock<Regex> = OnceLock::new();
        let date_suffix = DATE_SUFFIX.get_or_init(|| {
            Regex::new(r"[-@](\d{4}-\d{2}-\d{2}|\d{8})$")
                .expect("a constant pattern that compiles (unit-tested)")
        });
        let lower = model.trim().to_lowercase();
        let name = lower.rsplit('/').next().unwrap_or(&lower);
        let undated = date_suffix.replace(name, "");
        [name, undated.as_ref()]
            .into_iter()
            .find_map(|candidate| self.index.get(candidate))
            .and_then(|key| self.entries.get(key))
    }

    /// The cost of a call that used `usage`, at the price of the first of `names` in the table
    /// (the model as requested, then as the server named it: `gpt-4o` then
    /// `gpt-4o-2024-08-06`).
    pub fn cost(&self, names: &[&str], usage: Option<&Usage>) -> Cost {
        match (names.iter().find_map(|name| self.price(name)), usage) {
            (None, _) => Cost::Unknown(CostUnknown::NotInPriceTable),
            (Some(_), None) => Cost::Unknown(CostUnknown::NoUsageReported),
            (Some(price), Some(usage)) => Cost::Known(price.cost(usage)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_table_parses() {
        let table = PriceTable::from_toml(SHIPPED, Path::new(SHIPPED_PATH)).unwrap();
        for model in [
            "gpt-4o",
            "gpt-4.1",
            "o3",
            "o4-mini",
            "gpt-5",
            "claude-sonnet-4-5",
            "claude-opus-4-1",
            "claude-haiku-4-5",
            "deepseek-chat",
            "qwen3-coder-plus",
            "llama-3.3-70b-instruct-turbo",
        ] {
            assert!(table.price(model).is_some(), "{model} missing");
        }
        assert!(table.entries.len() >= 30);
    }

    #[test]
    fn names_match_snapshots_and_hosts_but_not_siblings() {
        let table = PriceTable::shipped();
        let input = |m: &str| table.price(m).map(|p| p.input);
        assert_eq!(input("gpt-4o-2024-08-06"), Some(2.50));
        assert_eq!(input("gpt-4o-mini"), Some(0.15));
        assert_eq!(input("GPT-4o-mini-2024-07-18"), Some(0.15));
        assert_eq!(input("claude-sonnet-4-5-20250929"), Some(3.00));
        assert_eq!(input("claude-sonnet-4-5@20250929"), Some(3.00));
        assert_eq!(input("claude-sonnet-4-0"), Some(3.00));
        assert_eq!(input("claude-opus-4-5-20251101"), Some(5.00));
        assert_eq!(input("deepseek/deepseek-chat"), Some(0.28));
        assert_eq!(input("meta-llama/Llama-3.3-70B-Instruct-Turbo"), Some(0.88));
        assert_eq!(input("gpt-4o-turbo"), None);
        assert_eq!(input("my-local-model"), None);
    }

    #[test]
    fn cost_counts_cached_and_written_tokens_at_their_rates() {
        let table = PriceTable::shipped();
        let usage = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 400_000,
            cache_write_input_tokens: 100_000,
            output_tokens: 200_000,
            reasoning_tokens: 50_000,
        };
        // claude-sonnet-4-5: 0.5M plain at 3, 0.4M cached at 0.30, 0.1M written at 3.75,
        // 0.2M out at 15.
        let Cost::Known(usd) = table.cost(&["claude-sonnet-4-5"], Some(&usage)) else {
            panic!("sonnet has a price");
        };
        assert!((usd - (1.5 + 0.12 + 0.375 + 3.0)).abs() < 1e-9, "{usd}");
        // o3-pro lists no cached rate: cached tokens cost the input rate.
        let Cost::Known(usd) = table.cost(&["my-proxy-name", "o3-pro"], Some(&usage)) else {
            panic!("o3-pro has a price");
        };
        assert!((usd - (20.0 + 0.2 * 80.0)).abs() < 1e-9, "{usd}");
    }

    #[test]
    fn unknown_is_never_zero() {
        let table = PriceTable::shipped();
        assert_eq!(
            table.cost(&["my-local-model"], Some(&Usage::default())),
            Cost::Unknown(CostUnknown::NotInPriceTable)
        );
        assert_eq!(
            table.cost(&["gpt-4o"], None),
            Cost::Unknown(CostUnknown::NoUsageReported)
        );
    }

    #[test]
    fn a_user_file_replaces_and_adds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prices.toml");
        std::fs::write(
            &path,
            "[models.\"gpt-4o\"]\nvendor = \"me\"\ndate = 2026-01-01\ninput = 1.0\noutput = 2.0\n\
             [models.\"qwen3-coder-30b\"]\nvendor = \"my server\"\ndate = 2026-01-01\ninput = 0\n\
             output = 0\n",
        )
        .unwrap();
        let mut llm = crate::config::Settings::default().llm;
        llm.price_table = Some(path.clone());
        let table = PriceTable::load(&llm).unwrap();
        assert_eq!(table.price("gpt-4o").map(|p| p.input), Some(1.0));
        assert_eq!(table.price("qwen3-coder-30b").map(|p| p.output), Some(0.0));
        assert_eq!(table.price("o3").map(|p| p.input), Some(2.0));
        // Replacing gpt-4o dropped the shipped alias with it.
        assert!(table.price("chatgpt-4o-latest").is_none());

        std::fs::write(&path, "[models.x]\nvendor = \"v\"\ninput = 1\noutput = 1\n").unwrap();
        let err = PriceTable::load(&llm).unwrap_err().to_string();
        assert!(err.contains("date"), "{err}");
        std::fs::write(
            &path,
            "[models.x]\nvendor = \"v\"\ndate = 2026-01-01\ninput = -1\noutput = 1\n",
        )
        .unwrap();
        let err = PriceTable::load(&llm).unwrap_err().to_string();
        assert!(err.contains("negative"), "{err}");
    }
}
