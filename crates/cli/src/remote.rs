//! Credentials for the tools that talk to a running TSD (`--url`), from the environment, so
//! they stay out of the command line (and `ps`):
//!
//! - `HOURGLASS_TOKEN`, or `HOURGLASS_TOKEN_FILE` (a file holding it): an API token, sent as
//!   `Authorization: Bearer`;
//! - else `HOURGLASS_USER` with `HOURGLASS_PASSWORD` or `HOURGLASS_PASSWORD_FILE`: sent as
//!   `Authorization: Basic`.
//!
//! Nothing set: no credentials (a TSD without authentication).

use anyhow::Context;
use base64::Engine;

/// The `Authorization` header value the environment gives, if any.
pub(crate) fn authorization() -> anyhow::Result<Option<String>> {
    authorization_from(|name| std::env::var(name).ok())
}

fn authorization_from(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<String>> {
    let secret = |value: &str, file: &str| -> anyhow::Result<Option<String>> {
        if let Some(v) = var(value).filter(|v| !v.is_empty()) {
            return Ok(Some(v));
        }
        match var(file).filter(|f| !f.is_empty()) {
            Some(path) => {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("cannot read {file}={path}"))?;
                Ok(Some(text.trim_end_matches(['\n', '\r']).to_string()))
            }
            None => Ok(None),
        }
    };
    if let Some(token) = secret("HOURGLASS_TOKEN", "HOURGLASS_TOKEN_FILE")? {
        return Ok(Some(format!("Bearer {}", token.trim())));
    }
    let Some(user) = var("HOURGLASS_USER").filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let password = secret("HOURGLASS_PASSWORD", "HOURGLASS_PASSWORD_FILE")?
        .context("HOURGLASS_USER is set without HOURGLASS_PASSWORD or HOURGLASS_PASSWORD_FILE")?;
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    Ok(Some(format!("Basic {pair}")))
}

/// A refusal of the TSD (401, 403, 429) as an error naming what to set.
pub(crate) fn check_status(status: u16, url: &str) -> anyhow::Result<()> {
    match status {
        401 => anyhow::bail!(
            "{url} asks for credentials (401): set HOURGLASS_TOKEN, or HOURGLASS_USER and \
             HOURGLASS_PASSWORD (or their _FILE forms)"
        ),
        403 => anyhow::bail!("{url} refused: the credentials lack the permission (403)"),
        429 => anyhow::bail!("{url} refused: too many failed authentications lately (429)"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> anyhow::Result<Option<String>> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        authorization_from(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn a_token_then_a_user_then_nothing() {
        assert_eq!(with(&[]).unwrap(), None);
        assert_eq!(
            with(&[("HOURGLASS_TOKEN", "hg_x"), ("HOURGLASS_USER", "u")]).unwrap(),
            Some("Bearer hg_x".into())
        );
        assert_eq!(
            with(&[("HOURGLASS_USER", "ops"), ("HOURGLASS_PASSWORD", "a b")]).unwrap(),
            Some("Basic b3BzOmEgYg==".into())
        );
        assert!(with(&[("HOURGLASS_USER", "ops")]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "hg_y\n").unwrap();
        assert_eq!(
            with(&[("HOURGLASS_TOKEN_FILE", file.to_str().unwrap())]).unwrap(),
            Some("Bearer hg_y".into())
        );
    }
}
