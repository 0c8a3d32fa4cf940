//! HTTP to a TSD (OpenTSDB 2.x or Hourglass): JSON text in and out, a request tried again
//! with backoff while the TSD answers 5xx or cannot be reached.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

/// A TSD's base URL and how to talk to it.
#[derive(Debug, Clone)]
pub(crate) struct Tsd {
    agent: ureq::Agent,
    /// `http://host:port`, no trailing slash.
    pub(crate) base: String,
    /// The `Authorization` header, if any.
    authorization: Option<String>,
    /// Further tries after a 5xx answer or a failed connection.
    retries: u32,
    /// The source of a migration: credentials are not sent to it.
    source: bool,
    /// Tries made again, over every request.
    pub(crate) retried: Arc<AtomicU64>,
}

/// A TSD's answer: status and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub(crate) fn json(&self) -> anyhow::Result<Value> {
        if self.body.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&self.body).with_context(|| {
            format!(
                "the TSD's answer ({}) is not JSON: {}",
                self.status,
                excerpt(&self.body)
            )
        })
    }

    /// OpenTSDB's `{"error":{"message":...}}`, or the body's start.
    pub(crate) fn message(&self) -> String {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| excerpt(&self.body))
    }
}

fn excerpt(text: &str) -> String {
    let t = text.trim();
    match t.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &t[..i]),
        None => t.to_string(),
    }
}

impl Tsd {
    /// The TSD copied from (no credentials).
    pub(crate) fn source(base: &str, retries: u32) -> anyhow::Result<Tsd> {
        let mut tsd = Tsd::new(base, None, retries)?;
        tsd.source = true;
        Ok(tsd)
    }

    pub(crate) fn new(
        base: &str,
        authorization: Option<String>,
        retries: u32,
    ) -> anyhow::Result<Tsd> {
        let base = base.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!(
                "{base:?} is not a TSD's URL: give http://HOST:PORT or https://HOST:PORT"
            );
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(Duration::from_secs(600)))
            .build()
            .into();
        Ok(Tsd {
            agent,
            base,
            authorization,
            retries,
            source: false,
            retried: Arc::new(AtomicU64::new(0)),
        })
    }

    pub(crate) fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.call(path, None)
    }

    pub(crate) fn post(&self, path: &str, body: &str) -> anyhow::Result<Answer> {
        self.call(path, Some(body))
    }

    /// One request, tried again (after 200 ms, doubling to 10 s) while it fails with a 5xx
    /// or cannot reach the TSD; a refusal of credentials is an error at once.
    fn call(&self, path: &str, body: Option<&str>) -> anyhow::Result<Answer> {
        let url = format!("{}{path}", self.base);
        let mut delay = Duration::from_millis(200);
        let mut attempt = 0;
        loop {
            let last = match self.once(&url, body) {
                Ok(answer) if answer.status < 500 => {
                    if self.source && matches!(answer.status, 401 | 403) {
                        anyhow::bail!(
                            "the source {} asks for credentials ({}): copying from a TSD \
                             behind authentication is not supported (HOURGLASS_TOKEN and the \
                             like are sent to the target only)",
                            self.base,
                            answer.status
                        );
                    }
                    crate::remote::check_status(answer.status, &self.base)?;
                    return Ok(answer);
                }
                Ok(answer) => format!("{url} answered {}: {}", answer.status, answer.message()),
                Err(e) => format!("cannot reach {url}: {e}"),
            };
            if attempt >= self.retries {
                anyhow::bail!("{last} (tried {} times)", attempt + 1);
            }
            tracing::warn!("{last}; trying again in {} ms", delay.as_millis());
            self.retried.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_secs(10));
            attempt += 1;
        }
    }

    fn once(&self, url: &str, body: Option<&str>) -> Result<Answer, ureq::Error> {
        let mut response = match body {
            Some(body) => {
                let mut request = self.agent.post(url);
                if let Some(a) = &self.authorization {
                    request = request.header("Authorization", a);
                }
                request
                    .header("Content-Type", "application/json")
                    .send(body)?
            }
            None => {
                let mut request = self.agent.get(url);
                if let Some(a) = &self.authorization {
                    request = request.header("Authorization", a);
                }
                request.call()?
            }
        };
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_string()?;
        Ok(Answer { status, body })
    }
}

/// `text` for a URL's query string: everything but unreserved characters percent-encoded.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_encoded_for_query_strings() {
        assert_eq!(encode("sys.cpu{host=a b}"), "sys.cpu%7Bhost%3Da%20b%7D");
        assert_eq!(encode("é"), "%C3%A9");
    }
}
