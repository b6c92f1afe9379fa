//! The one retry policy: every [`LlmError`] is sorted by a single exhaustive `match` into fatal,
//! transient or rate-limited, and a retried error waits for the server's `Retry-After` when it
//! gave one, else for a jittered exponential backoff. Delays come from the policy's numbers, so
//! tests set them to milliseconds instead of sleeping for real backoff.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use crate::config::LlmSettings;

use super::LlmError;

/// What to do after an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryClass {
    /// Retrying cannot help (bad key, context too long, invalid request, ...).
    Fatal,
    /// The network or the server failed this once (timeouts, 5xx, cut-off replies).
    Transient,
    /// The server said "too many requests"; wait as it asks.
    RateLimited,
}

pub fn classify(err: &LlmError) -> RetryClass {
    match err {
        LlmError::RateLimited { .. } => RetryClass::RateLimited,
        LlmError::Server { .. }
        | LlmError::Timeout { .. }
        | LlmError::Connect { .. }
        | LlmError::Transport { .. }
        | LlmError::BadReply { .. } => RetryClass::Transient,
        LlmError::BadModel { .. }
        | LlmError::NoModel { .. }
        | LlmError::BadSetting { .. }
        | LlmError::MissingKey { .. }
        | LlmError::MissingBaseUrl
        | LlmError::Unsupported { .. }
        | LlmError::HttpSetup { .. }
        | LlmError::ContextLength { .. }
        | LlmError::Auth { .. }
        | LlmError::Quota { .. }
        | LlmError::InvalidRequest { .. }
        | LlmError::NotFound { .. }
        | LlmError::UnexpectedStatus { .. }
        | LlmError::GaveUp { .. }
        | LlmError::PriceTable { .. }
        | LlmError::Record { .. }
        | LlmError::ReplayFile { .. }
        | LlmError::ReplayMiss { .. }
        | LlmError::ScriptExhausted { .. } => RetryClass::Fatal,
    }
}

/// How often and how long to retry.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// The first backoff; each later one doubles, up to `max_delay`.
    pub base_delay: Duration,
    /// The longest wait, for backoff and for a server's `Retry-After` alike.
    pub max_delay: Duration,
}

impl RetryPolicy {
    pub fn from_settings(llm: &LlmSettings) -> Result<RetryPolicy, LlmError> {
        Ok(RetryPolicy {
            max_retries: llm.max_retries,
            base_delay: seconds("llm.retry_base_delay_s", llm.retry_base_delay_s)?,
            max_delay: seconds("llm.retry_max_delay_s", llm.retry_max_delay_s)?,
        })
    }

    /// The wait before retry number `retry` (1 for the first retry) after `err`. A server's
    /// `Retry-After` wins over the backoff, capped at `max_delay`.
    pub fn delay(&self, retry: u32, err: &LlmError) -> Duration {
        if let Some(asked) = err.retry_after() {
            return asked.min(self.max_delay);
        }
        let doubling = 2u32.saturating_pow(retry.saturating_sub(1));
        let backoff = self.base_delay.saturating_mul(doubling).min(self.max_delay);
        // Jitter in [½, 1] of the backoff keeps many clients that failed together from
        // retrying together.
        backoff.mul_f64(rand::random_range(0.5..=1.0))
    }
}

/// A positive, finite number of seconds from a setting.
pub(crate) fn seconds(key: &'static str, value: f64) -> Result<Duration, LlmError> {
    Duration::try_from_secs_f64(value).map_err(|_| LlmError::BadSetting {
        key,
        reason: format!("{value} is not a number of seconds"),
    })
}

/// The wait a reply asks for: OpenAI's `retry-after-ms`, else `Retry-After` in seconds or as an
/// HTTP date.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && let Ok(wait) = Duration::try_from_secs_f64(ms / 1000.0)
    {
        return Some(wait);
    }
    header("retry-after").and_then(|v| parse_retry_after(v, now))
}

/// `Retry-After: 7`, `Retry-After: 1.5` or `Retry-After: Wed, 21 Oct 2015 07:28:00 GMT`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ProviderKind;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        }
    }

    fn server_error(retry_after: Option<Duration>) -> LlmError {
        LlmError::Server {
            provider: ProviderKind::OpenAi,
            status: 503,
            message: "busy".into(),
            retry_after,
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_a_cap() {
        let p = policy();
        for _ in 0..50 {
            let first = p.delay(1, &server_error(None));
            assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
            let third = p.delay(3, &server_error(None));
            assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
            let late = p.delay(30, &server_error(None));
            assert!(late >= Duration::from_secs(1) && late <= Duration::from_secs(2));
        }
    }

    #[test]
    fn retry_after_wins_up_to_the_cap() {
        let p = policy();
        let asked = server_error(Some(Duration::from_millis(1500)));
        assert_eq!(p.delay(1, &asked), Duration::from_millis(1500));
        let limited = LlmError::RateLimited {
            provider: ProviderKind::Anthropic,
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(3600)),
        };
        assert_eq!(p.delay(1, &limited), Duration::from_secs(2));
    }

    #[test]
    fn retry_after_forms() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("0.25", now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-3", now), None);

        let mut headers = HeaderMap::new();
        headers.insert("retry-after", "9".parse().unwrap());
        assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(9)));
        headers.insert("retry-after-ms", "120".parse().unwrap());
        assert_eq!(retry_after(&headers, now), Some(Duration::from_millis(120)));
    }

    #[test]
    fn classes() {
        assert_eq!(classify(&server_error(None)), RetryClass::Transient);
        let context = LlmError::ContextLength {
            limit: None,
            message: String::new(),
        };
        assert_eq!(classify(&context), RetryClass::Fatal);
        let quota = LlmError::Quota {
            provider: ProviderKind::OpenAi,
            message: String::new(),
        };
        assert_eq!(classify(&quota), RetryClass::Fatal);
        let limited = LlmError::RateLimited {
            provider: ProviderKind::OpenAi,
            message: String::new(),
            retry_after: None,
        };
        assert_eq!(classify(&limited), RetryClass::RateLimited);
    }

    #[test]
    fn settings_must_be_seconds() {
        let mut llm = crate::config::Settings::default().llm;
        llm.retry_base_delay_s = -1.0;
        let err = RetryPolicy::from_settings(&llm).unwrap_err().to_string();
        assert!(err.contains("llm.retry_base_delay_s"), "{err}");
    }
}
