//! Settings, resolved once: command line > environment (`KFORGE_*` and the providers'
//! conventional variables) > project `kforge.toml` > user config > defaults.
//!
//! Every environment variable kforge reads is listed in [`ENV_VARS`], the one place that maps a
//! variable to a settings key. Each layer is a named figment provider, so `kforge config show`
//! can say where every value came from. Secrets ([`Secret`]) never print: their `Debug`,
//! `Display` and serialized forms say only whether they are set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map};
use figment::{Figment, Metadata, Profile, Provider};
use serde::{Deserialize, Serialize};

/// A setting's environment variable, the key it sets and what it is for.
pub struct EnvVar {
    pub name: &'static str,
    pub key: &'static str,
    pub help: &'static str,
}

/// Every environment variable kforge reads as a setting. (`KFORGE_CONFIG` and `RUST_LOG` are
/// read before settings exist and are documented in the README.)
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "KFORGE_HOME",
        key: "home",
        help: "cache for pinned tools, compiled kernels and baselines",
    },
    EnvVar {
        name: "KFORGE_NVCC",
        key: "tools.nvcc",
        help: "nvcc to compile candidates with",
    },
    EnvVar {
        name: "KFORGE_NCU",
        key: "tools.ncu",
        help: "Nsight Compute CLI",
    },
    EnvVar {
        name: "KFORGE_PYTHON",
        key: "tools.python",
        help: "python3 with torch, for importing problems",
    },
    EnvVar {
        name: "KFORGE_CODER",
        key: "llm.coder",
        help: "Coder model, provider:model",
    },
    EnvVar {
        name: "KFORGE_JUDGE",
        key: "llm.judge",
        help: "Judge model, provider:model",
    },
    EnvVar {
        name: "OPENAI_API_KEY",
        key: "llm.openai.api_key",
        help: "OpenAI key",
    },
    EnvVar {
        name: "OPENAI_BASE_URL",
        key: "llm.openai.base_url",
        help: "OpenAI (or compatible) base URL",
    },
    EnvVar {
        name: "ANTHROPIC_API_KEY",
        key: "llm.anthropic.api_key",
        help: "Anthropic key",
    },
    EnvVar {
        name: "ANTHROPIC_BASE_URL",
        key: "llm.anthropic.base_url",
        help: "Anthropic base URL",
    },
    EnvVar {
        name: "KFORGE_COMPAT_API_KEY",
        key: "llm.openai_compat.api_key",
        help: "key for OpenAI-compatible servers",
    },
    EnvVar {
        name: "KFORGE_COMPAT_BASE_URL",
        key: "llm.openai_compat.base_url",
        help: "default OpenAI-compatible base URL",
    },
    EnvVar {
        name: "KFORGE_PRICE_TABLE",
        key: "llm.price_table",
        help: "TOML price table laid over the shipped one",
    },
    EnvVar {
        name: "KFORGE_LLM_TIMEOUT",
        key: "llm.timeout_s",
        help: "seconds one LLM request may take",
    },
    EnvVar {
        name: "KFORGE_ARCH",
        key: "eval.arch",
        help: "GPU architecture to build for when no GPU is present (sm_90)",
    },
    EnvVar {
        name: "KFORGE_TRIALS",
        key: "eval.trials",
        help: "correctness trials per candidate",
    },
];

/// Read before settings: the path of the user config file.
pub const CONFIG_FILE_ENV: &str = "KFORGE_CONFIG";
/// The project file, looked up from the working directory upwards.
pub const PROJECT_FILE: &str = "kforge.toml";

/// A secret value (an API key). Printing it shows only that it is set.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    /// The secret itself, for the one place that sends it (an HTTP header).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<set>")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<set>")
    }
}

/// All of kforge's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Cache for pinned tools, the compile cache and baselines.
    pub home: PathBuf,
    pub tools: ToolSettings,
    pub llm: LlmSettings,
    pub eval: EvalSettings,
}

/// Where the external tools are; unset means "look in the usual places".
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSettings {
    pub nvcc: Option<PathBuf>,
    pub ncu: Option<PathBuf>,
    pub python: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSettings {
    pub coder: Option<String>,
    pub judge: Option<String>,
    /// The Coder's temperature, max_output_tokens and reasoning_effort.
    pub coder_sampling: crate::llm::Sampling,
    pub judge_sampling: crate::llm::Sampling,
    /// A TOML price table whose entries replace or add to the shipped one.
    pub price_table: Option<PathBuf>,
    /// Seconds one request may take before it counts as failed (and is retried).
    pub timeout_s: f64,
    /// Retries after the first attempt, for transport errors, 429 and 5xx.
    pub max_retries: u32,
    /// First backoff between attempts; it doubles with each retry, with jitter.
    pub retry_base_delay_s: f64,
    /// Longest wait between attempts, a server's Retry-After included.
    pub retry_max_delay_s: f64,
    pub openai: ProviderSettings,
    pub anthropic: ProviderSettings,
    pub openai_compat: ProviderSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSettings {
    pub api_key: Option<Secret>,
    pub base_url: Option<String>,
    /// Requests in flight at once to one endpoint of this provider, across Coder and Judge.
    pub max_concurrency: u32,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        ProviderSettings {
            api_key: None,
            base_url: None,
            max_concurrency: 8,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSettings {
    /// Architecture to compile for when no GPU is visible, e.g. `sm_90`.
    pub arch: String,
    /// Correctness trials, each on fresh inputs (at least 5: DESIGN.md §4).
    pub trials: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            home: default_home(),
            tools: ToolSettings::default(),
            llm: LlmSettings {
                coder: None,
                judge: None,
                coder_sampling: crate::llm::Sampling::default(),
                judge_sampling: crate::llm::Sampling::default(),
                price_table: None,
                timeout_s: 600.0,
                max_retries: 4,
                retry_base_delay_s: 1.0,
                retry_max_delay_s: 120.0,
                openai: ProviderSettings::default(),
                anthropic: ProviderSettings::default(),
                openai_compat: ProviderSettings::default(),
            },
            eval: EvalSettings {
                arch: "sm_90".into(),
                trials: 5,
            },
        }
    }
}

fn default_home() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("kforge")
}

/// The user config file: `$KFORGE_CONFIG`, else `~/.config/kforge/config.toml`.
pub fn user_config_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(CONFIG_FILE_ENV) {
        return Some(PathBuf::from(path));
    }
    dirs::config_dir().map(|dir| dir.join("kforge").join("config.toml"))
}

/// `kforge.toml` in `start` or the nearest ancestor that has one.
pub fn project_config_path(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join(PROJECT_FILE))
        .find(|path| path.is_file())
}

/// Where resolution looks: the files and the command-line overrides.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    pub user_file: Option<PathBuf>,
    pub project_file: Option<PathBuf>,
    /// `key=value` pairs from `--set`, values parsed as TOML (bare words as strings).
    pub cli: Vec<(String, String)>,
}

impl Sources {
    /// The usual places, seen from the working directory.
    pub fn discover(cli: Vec<(String, String)>) -> Self {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Sources {
            user_file: user_config_path().filter(|p| p.is_file()),
            project_file: project_config_path(&cwd),
            cli,
        }
    }
}

/// Settings plus where each value came from.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub settings: Settings,
    figment: Figment,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("bad setting: {0}")]
    Invalid(String),
    #[error("`--set {0}`: expected KEY=VALUE, e.g. --set eval.trials=8")]
    BadOverride(String),
}

/// A provider whose values carry a name of our choosing ("env OPENAI_API_KEY", "kforge.toml").
struct Named<P> {
    inner: P,
    name: String,
}

impl<P: Provider> Provider for Named<P> {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }
    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        self.inner.data()
    }
}

/// Parses `KEY=VALUE` from `--set`.
pub fn parse_override(text: &str) -> Result<(String, String), ConfigError> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(ConfigError::BadOverride(text.to_string())),
    }
}

/// Resolves settings from every layer, highest precedence last.
pub fn resolve(sources: &Sources) -> Result<Resolved, ConfigError> {
    let mut figment = Figment::new().merge(Named {
        inner: Serialized::defaults(Settings::default()),
        name: "default".into(),
    });
    for (file, label) in [
        (&sources.user_file, "user config"),
        (&sources.project_file, "project kforge.toml"),
    ] {
        if let Some(path) = file {
            figment = figment.merge(Named {
                inner: Toml::file(path),
                name: format!("{label} ({})", crate::paths::display(path)),
            });
        }
    }
    for var in ENV_VARS {
        // Empty variables count as unset, as shells commonly leave them.
        if std::env::var(var.name).is_ok_and(|v| !v.is_empty()) {
            let key = var.key;
            figment = figment.merge(Named {
                inner: Env::raw().only(&[var.name]).map(move |_| key.into()),
                name: format!("env {}", var.name),
            });
        }
    }
    for (key, value) in &sources.cli {
        let parsed = parse_toml_scalar(value);
        figment = figment.merge(Named {
            inner: Serialized::global(key, parsed),
            name: format!("--set {key}"),
        });
    }
    let settings: Settings = figment
        .extract()
        .map_err(|e| ConfigError::Invalid(e.to_string()))?;
    if settings.eval.trials < 5 {
        return Err(ConfigError::Invalid(format!(
            "eval.trials = {} but the protocol needs at least 5 correctness trials",
            settings.eval.trials
        )));
    }
    Ok(Resolved { settings, figment })
}

/// `8` → integer, `true` → bool, anything that is not a TOML literal → string.
fn parse_toml_scalar(text: &str) -> toml::Value {
    let wrapped = format!("v = {text}");
    match toml::from_str::<toml::Table>(&wrapped) {
        Ok(mut table) => table
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(text.to_string())),
        Err(_) => toml::Value::String(text.to_string()),
    }
}

/// One line of `kforge config show`.
#[derive(Debug, Clone, Serialize)]
pub struct ShownSetting {
    pub key: String,
    pub value: serde_json::Value,
    pub source: String,
}

impl Resolved {
    /// Every leaf setting with its (redacted) value and source.
    pub fn show(&self) -> Vec<ShownSetting> {
        let value = serde_json::to_value(&self.settings).unwrap_or_default();
        let mut leaves = BTreeMap::new();
        flatten("", &value, &mut leaves);
        leaves
            .into_iter()
            .map(|(key, value)| {
                let source = self
                    .figment
                    .find_metadata(&key)
                    .map(|m| m.name.to_string())
                    .unwrap_or_else(|| "default".into());
                ShownSetting { key, value, source }
            })
            .collect()
    }
}

fn flatten(prefix: &str, value: &serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        leaf => {
            out.insert(prefix.to_string(), leaf.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    // Environment variables are process-wide; tests that set them take this lock.
    static ENV_LOCK: Mutex<()> = Mutex::new(());

    fn with_env<T>(vars: &[(&str, &str)], f: impl FnOnce() -> T) -> T {
        let _guard = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let saved: Vec<_> = ENV_VARS
            .iter()
            .map(|v| (v.name, std::env::var_os(v.name)))
            .collect();
        // SAFETY: serialized by ENV_LOCK; no other thread of these tests reads the environment.
        unsafe {
            for var in ENV_VARS {
                std::env::remove_var(var.name);
            }
            for (k, v) in vars {
                std::env::set_var(k, v);
            }
        }
        let result = f();
        unsafe {
            for (k, v) in saved {
                match v {
                    Some(v) => std::env::set_var(k, v),
                    None => std::env::remove_var(k),
                }
            }
        }
        result
    }

    fn source_of(resolved: &Resolved, key: &str) -> String {
        resolved
            .show()
            .into_iter()
            .find(|s| s.key == key)
            .map(|s| s.source)
            .unwrap_or_default()
    }

    fn files(dir: &Path, user: &str, project: &str) -> Sources {
        let user_file = dir.join("user.toml");
        let project_file = dir.join("kforge.toml");
        std::fs::write(&user_file, user).unwrap();
        std::fs::write(&project_file, project).unwrap();
        Sources {
            user_file: Some(user_file),
            project_file: Some(project_file),
            cli: Vec::new(),
        }
    }

    #[test]
    fn each_layer_overrides_the_one_below() {
        let dir = tempfile::tempdir().unwrap();
        let mut sources = files(
            dir.path(),
            "[llm]\ncoder = \"user:c\"\njudge = \"user:j\"\n[eval]\ntrials = 6\narch = \"sm_80\"\n",
            "[llm]\ncoder = \"project:c\"\njudge = \"project:j\"\n[eval]\ntrials = 7\n",
        );
        sources.cli = vec![("llm.coder".into(), "cli:c".into())];
        let resolved = with_env(
            &[("KFORGE_CODER", "env:c"), ("KFORGE_JUDGE", "env:j")],
            || resolve(&sources).unwrap(),
        );
        let s = &resolved.settings;
        assert_eq!(s.llm.coder.as_deref(), Some("cli:c"));
        assert_eq!(s.llm.judge.as_deref(), Some("env:j"));
        assert_eq!(s.eval.trials, 7);
        assert_eq!(s.eval.arch, "sm_80");
        assert_eq!(source_of(&resolved, "llm.coder"), "--set llm.coder");
        assert_eq!(source_of(&resolved, "llm.judge"), "env KFORGE_JUDGE");
        assert!(source_of(&resolved, "eval.trials").starts_with("project kforge.toml"));
        assert!(source_of(&resolved, "eval.arch").starts_with("user config"));
        assert_eq!(source_of(&resolved, "home"), "default");
    }

    #[test]
    fn defaults_apply_without_any_file() {
        let resolved = with_env(&[], || resolve(&Sources::default()).unwrap());
        assert_eq!(resolved.settings.eval.trials, 5);
        assert_eq!(resolved.settings.eval.arch, "sm_90");
        assert!(resolved.settings.llm.openai.api_key.is_none());
    }

    #[test]
    fn secrets_never_show() {
        let resolved = with_env(&[("OPENAI_API_KEY", "sk-test-abcdef123456")], || {
            resolve(&Sources::default()).unwrap()
        });
        let shown = serde_json::to_string(&resolved.show()).unwrap();
        assert!(!shown.contains("sk-test"), "{shown}");
        assert!(shown.contains("<set>"));
        assert!(!format!("{:?}", resolved.settings).contains("sk-test"));
        assert_eq!(
            resolved
                .settings
                .llm
                .openai
                .api_key
                .as_ref()
                .map(Secret::expose),
            Some("sk-test-abcdef123456")
        );
        assert_eq!(
            source_of(&resolved, "llm.openai.api_key"),
            "env OPENAI_API_KEY"
        );
    }

    #[test]
    fn cli_values_are_typed() {
        let sources = Sources {
            cli: vec![("eval.trials".into(), "9".into())],
            ..Sources::default()
        };
        let resolved = with_env(&[], || resolve(&sources).unwrap());
        assert_eq!(resolved.settings.eval.trials, 9);
    }

    #[test]
    fn bad_values_name_the_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let sources = files(dir.path(), "", "[eval]\ntrials = \"many\"\n");
        let err = with_env(&[], || resolve(&sources).unwrap_err()).to_string();
        assert!(err.contains("eval.trials"), "{err}");
        assert!(err.contains("kforge.toml"), "{err}");

        let sources = files(dir.path(), "", "[eval]\ntrails = 5\n");
        let err = with_env(&[], || resolve(&sources).unwrap_err()).to_string();
        assert!(err.contains("trails"), "{err}");

        let sources = Sources {
            cli: vec![("eval.trials".into(), "2".into())],
            ..Sources::default()
        };
        let err = with_env(&[], || resolve(&sources).unwrap_err()).to_string();
        assert!(err.contains("at least 5"), "{err}");
    }

    #[test]
    fn override_syntax() {
        assert_eq!(
            parse_override("a.b = c").unwrap(),
            ("a.b".to_string(), "c".to_string())
        );
        assert!(parse_override("novalue").is_err());
        assert!(parse_override("=x").is_err());
    }

    #[test]
    fn project_file_is_found_upwards() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(PROJECT_FILE), "").unwrap();
        let nested = dir.path().join("a/b");
        std::fs::create_dir_all(&nested).unwrap();
        assert_eq!(
            project_config_path(&nested),
            Some(dir.path().join(PROJECT_FILE))
        );
    }
}
