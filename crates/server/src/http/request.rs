//! Request plumbing shared by the metadata endpoints: URL parameters with OpenTSDB's rules,
//! JSON bodies, method overrides, blocking engine calls and empty-bodied replies.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use hourglass_engine::{Error as EngineError, ErrorKind, Tsdb};
use serde_json::{Map, Value};

use super::ApiError;

/// Query parameters of the URL, in order, read as OpenTSDB's HTTP layer reads them
/// ([`decode_query`]); an escape it would refuse (the front answers those requests) is kept
/// as sent.
pub(crate) fn url_params(raw: Option<&str>) -> Vec<(String, String)> {
    let raw = raw.unwrap_or("");
    decode_query(raw, false).unwrap_or_default()
}

/// Most parameters read from one query string, as OpenTSDB's HTTP layer (Netty 3) reads: any
/// further ones are dropped.
const MAX_PARAMS: usize = 1024;

/// Decodes a query string as OpenTSDB's HTTP layer (Netty 3's `QueryStringDecoder`) does: `;`
/// separates parameters as `&` does, `+` is a space, `%%` is `%`, a name without `=` has
/// the empty value, and at most [`MAX_PARAMS`] parameters are read. A bad `%` escape is
/// refused in Netty's words when `strict`, else kept as sent.
pub(crate) fn decode_query(raw: &str, strict: bool) -> Result<Vec<(String, String)>, String> {
    let s = raw.replace(';', "&");
    fn add(out: &mut Vec<(String, String)>, name: String, value: String) {
        if out.len() < MAX_PARAMS {
            out.push((name, value));
        }
    }
    let mut out: Vec<(String, String)> = Vec::new();
    let mut name: Option<String> = None;
    let mut pos = 0;
    for (i, c) in s.char_indices() {
        if c == '=' && name.is_none() {
            if pos != i {
                name = Some(decode_component(&s[pos..i], strict)?);
            }
            pos = i + 1;
        } else if c == '&' {
            match name.take() {
                None if pos != i => add(
                    &mut out,
                    decode_component(&s[pos..i], strict)?,
                    String::new(),
                ),
                None => {}
                Some(n) => add(&mut out, n, decode_component(&s[pos..i], strict)?),
            }
            pos = i + 1;
        }
    }
    if pos != s.len() {
        let rest = decode_component(&s[pos..], strict)?;
        match name {
            None => add(&mut out, rest, String::new()),
            Some(n) => add(&mut out, n, rest),
        }
    } else if let Some(n) = name {
        add(&mut out, n, String::new());
    }
    Ok(out)
}

/// One name or value: `+` is a space, `%XX` a byte, `%%` a `%`; the bytes are read as UTF-8
/// (a bad sequence becomes U+FFFD). Netty's messages for a bad escape when `strict`.
pub(crate) fn decode_component(s: &str, strict: bool) -> Result<String, String> {
    if !s.contains(['%', '+']) {
        return Ok(s.to_string());
    }
    let bytes = s.as_bytes();
    let mut buf = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => buf.push(b' '),
            b'%' => {
                let next = bytes.get(i + 1).copied();
                if next == Some(b'%') {
                    buf.push(b'%');
                    i += 2;
                    continue;
                }
                let pair = next.zip(bytes.get(i + 2).copied());
                let decoded = pair.and_then(|(a, b)| Some(hex_nibble(a)? << 4 | hex_nibble(b)?));
                if let Some(byte) = decoded {
                    buf.push(byte);
                    i += 3;
                    continue;
                }
                if strict {
                    return Err(match pair {
                        Some((a, b)) => format!(
                            "invalid escape sequence `%{}{}' at index {i} of: {s}",
                            char::from(a),
                            char::from(b)
                        ),
                        None if next.is_none() => {
                            format!("unterminated escape sequence at end of string: {s}")
                        }
                        None => format!("partial escape sequence at end of string: {s}"),
                    });
                }
                buf.push(b'%');
            }
            other => buf.push(other),
        }
        i += 1;
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn hex_nibble(c: u8) -> Option<u8> {
    (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// URL parameters; a repeated one reads as its last value, as OpenTSDB.
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    pub(crate) fn parse(raw: Option<&str>) -> Params {
        Params(url_params(raw))
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A non-empty value.
    pub(crate) fn value(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    /// A required non-empty value: OpenTSDB's `Missing parameter <code>key</code>`.
    pub(crate) fn required(&self, key: &str) -> Result<&str, ApiError> {
        self.value(key)
            .ok_or_else(|| ApiError::bad_request(format!("Missing parameter <code>{key}</code>")))
    }
}

pub(crate) fn has_body(body: &Bytes) -> bool {
    !body.iter().all(u8::is_ascii_whitespace)
}

/// Parses a JSON body: empty → `Missing message content`, bad → `Unable to parse the given JSON`.
pub(crate) fn json_body(body: &Bytes) -> Result<Value, ApiError> {
    if !has_body(body) {
        return Err(ApiError::bad_request("Missing message content")
            .with_details("Supply valid JSON formatted data in the body of your request"));
    }
    super::json::from_slice(body).map_err(|e| {
        ApiError::bad_request("Unable to parse the given JSON").with_details(e.to_string())
    })
}

/// A JSON body that must be an object.
pub(crate) fn json_object(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    match json_body(body)? {
        Value::Object(o) => Ok(o),
        other => Err(ApiError::bad_request("Unable to parse the given JSON")
            .with_details(format!("expected a JSON object, got: {}", kind_of(&other)))),
    }
}

pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The method an endpoint acts on: a GET may carry `method_override=post|put|delete|get`.
pub(crate) fn api_method(method: &Method, params: &Params) -> Result<Method, ApiError> {
    if *method != Method::GET {
        return Ok(method.clone());
    }
    match params.get("method_override") {
        None => Ok(Method::GET),
        Some("") => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Missing method override value",
        )),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "get" => Ok(Method::GET),
            "post" => Ok(Method::POST),
            "put" => Ok(Method::PUT),
            "delete" => Ok(Method::DELETE),
            _ => Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Unknown or unsupported method override value",
            )),
        },
    }
}

/// Runs blocking engine work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    tsdb: &Arc<Tsdb>,
    f: impl FnOnce(&Tsdb) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let tsdb = Arc::clone(tsdb);
    tokio::task::spawn_blocking(move || f(&tsdb))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("request failed: {e}"),
            )
        })?
}

/// Engine work for a request the caller judged small: run on the calling thread (the
/// connection's) when [`crate::ServerSettings::inline_queries`] is on, the store is this
/// TSD's own (not one read over the network), and a spare worker thread is left to serve
/// other connections meanwhile; else handed to a blocking thread as [`blocking`] does. The
/// result is the same either way: handing over costs more than a small query's own work (a
/// thread woken to take it, and the connection's thread woken again for its answer).
pub(crate) async fn small_or_blocking<T: Send + 'static>(
    state: &Arc<crate::State>,
    small: bool,
    f: impl FnOnce(&Tsdb) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    match small.then(|| InlineSlot::take(state)).flatten() {
        Some(_slot) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&state.tsdb)))
            .unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("request failed: the query panicked: {why}"),
                ))
            }),
        None => blocking(&state.tsdb, f).await,
    }
}

/// A place for one query on a connection's thread, held while it runs: at most one fewer
/// than the runtime's worker threads at once, so one is always free for the others.
struct InlineSlot<'s> {
    running: &'s std::sync::atomic::AtomicUsize,
}

impl<'s> InlineSlot<'s> {
    fn take(state: &'s crate::State) -> Option<InlineSlot<'s>> {
        use std::sync::atomic::Ordering;
        if !state.settings.inline_queries || state.tsdb.store().is_shared() {
            return None;
        }
        let handle = tokio::runtime::Handle::try_current().ok()?;
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        let spare = handle.metrics().num_workers().saturating_sub(1);
        state
            .inline_running
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < spare).then_some(n + 1)
            })
            .ok()?;
        Some(InlineSlot {
            running: &state.inline_running,
        })
    }
}

impl Drop for InlineSlot<'_> {
    fn drop(&mut self) {
        self.running
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

pub(crate) fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// An engine error with a given message for "not found" (404) and the engine's text as
/// details; everything else as any engine error is answered (`ApiError::from`).
pub(crate) fn not_found_as(e: EngineError, message: &str) -> ApiError {
    match e.kind() {
        ErrorKind::NotFound => {
            ApiError::new(StatusCode::NOT_FOUND, message).with_details(e.to_string())
        }
        _ => ApiError::from(e),
    }
}

/// Refuses writes on a read-only TSD.
pub(crate) fn check_writable(state: &crate::State) -> Result<(), ApiError> {
    if state.settings.read_only {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "This TSD is in read-only mode",
        ));
    }
    Ok(())
}

/// `metric{k=v,...}` split as OpenTSDB's `Tags.parseWithMetric` splits it: the metric and
/// the text between the braces (empty without braces); a `{` needs a closing `}` last.
pub(crate) fn split_metric(text: &str) -> Result<(&str, &str), String> {
    match text.find('{') {
        None => Ok((text, "")),
        Some(_) if !text.ends_with('}') => Err(format!("Missing '}}' at the end of: {text}")),
        Some(curly) => Ok((&text[..curly], &text[curly + 1..text.len() - 1])),
    }
}

/// The `k=v,...` pairs between the braces of [`split_metric`], as `Tags.parseWithMetric`
/// reads them: each pair one `=` with both sides, a pair given twice with one value counted
/// once, errors in its words.
pub(crate) fn exact_tag_pairs(inner: &str) -> Result<Vec<(String, String)>, String> {
    let mut tags: Vec<(String, String)> = Vec::new();
    if inner.is_empty() {
        return Ok(tags);
    }
    for tag in inner.split(',') {
        let kv: Vec<&str> = tag.split('=').collect();
        let (k, v) = match kv[..] {
            [k, v] if !k.is_empty() && !v.is_empty() => (k, v),
            _ => return Err(format!("When parsing tag '{tag}': invalid tag: {tag}")),
        };
        match tags.iter().find(|(tk, _)| tk == k) {
            Some((_, tv)) if tv == v => {}
            Some(_) => {
                let known: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
                return Err(format!(
                    "When parsing tag '{tag}': duplicate tag: {tag}, tags={{{}}}",
                    known.join(", ")
                ));
            }
            None => tags.push((k.to_string(), v.to_string())),
        }
    }
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread::ThreadId;

    fn pairs(raw: &str) -> Vec<(String, String)> {
        decode_query(raw, true).unwrap()
    }

    fn owned(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn query_strings_decode_as_netty_decodes_them() {
        assert_eq!(
            pairs("a=1;b=2&c"),
            owned(&[("a", "1"), ("b", "2"), ("c", "")])
        );
        assert_eq!(pairs("a=x+y%2Bz%%"), owned(&[("a", "x y+z%")]));
        assert_eq!(pairs("a==b&&c="), owned(&[("a", "=b"), ("c", "")]));
        // A value without a name is read as a name, as Netty reads it.
        assert_eq!(pairs("=v&w"), owned(&[("v", ""), ("w", "")]));
        assert_eq!(pairs("t=%C3%A9%FF"), owned(&[("t", "é\u{fffd}")]));
        assert_eq!(pairs(""), owned(&[]));
        let many = vec!["k=v"; MAX_PARAMS + 5].join("&");
        assert_eq!(pairs(&many).len(), MAX_PARAMS);
        assert_eq!(
            decode_query("a=%zz", true).unwrap_err(),
            "invalid escape sequence `%zz' at index 0 of: %zz"
        );
        // Lenient: kept as sent.
        assert_eq!(
            decode_query("a=%zz&b=%&c=%4", false).unwrap(),
            owned(&[("a", "%zz"), ("b", "%"), ("c", "%4")])
        );
    }

    proptest::proptest! {
        #[test]
        fn decoding_never_panics(raw in "\\PC{0,40}") {
            let _ = decode_query(&raw, true);
            let _ = decode_query(&raw, false);
        }
    }

    fn state(inline_queries: bool) -> Arc<crate::State> {
        let store = Arc::new(hourglass_storage::memory::MemoryStore::new());
        let tsdb = Tsdb::open(store, hourglass_engine::Settings::default()).unwrap();
        let settings = crate::ServerSettings {
            inline_queries,
            ..crate::ServerSettings::default()
        };
        crate::State::new(tsdb, hourglass_core::config::Config::default(), settings)
    }

    /// The thread `small_or_blocking` ran its work on.
    async fn ran_on(state: &Arc<crate::State>, small: bool) -> ThreadId {
        small_or_blocking(state, small, |_| Ok(std::thread::current().id()))
            .await
            .unwrap()
    }

    /// Small work runs on the calling thread while a spare worker is left; everything else
    /// (large work, the switch off, no spare worker) on another thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_work_runs_on_the_calling_thread() {
        let here = std::thread::current().id();
        let on = state(true);
        assert_eq!(ran_on(&on, true).await, here);
        assert_ne!(ran_on(&on, false).await, here);
        assert_eq!(
            on.inline_running.load(std::sync::atomic::Ordering::Acquire),
            0
        );
        assert_ne!(ran_on(&state(false), true).await, here);
        // Two workers leave room for one query at a time: a second one meanwhile is handed
        // over, and the slot is free again afterwards.
        let inner = Arc::clone(&on);
        let nested = small_or_blocking(&on, true, move |_| {
            let outer = std::thread::current().id();
            let handle = tokio::runtime::Handle::current();
            let second = std::thread::scope(|s| {
                s.spawn(|| handle.block_on(ran_on(&inner, true)))
                    .join()
                    .unwrap()
            });
            Ok((outer, second))
        })
        .await
        .unwrap();
        assert_eq!(nested.0, here);
        assert_ne!(nested.1, here);
        assert_eq!(ran_on(&on, true).await, here);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn one_thread_runtimes_hand_work_over() {
        assert_ne!(
            ran_on(&state(true), true).await,
            std::thread::current().id()
        );
    }

    /// A panic in work run on the calling thread is a 500 answer, as one on a blocking
    /// thread is, and frees its slot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panic_inline_is_an_error_answer() {
        let on = state(true);
        let err = small_or_blocking(&on, true, |_| -> Result<(), ApiError> { panic!("broken") })
            .await
            .unwrap_err();
        assert_eq!(err.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(err.message.contains("broken"), "{}", err.message);
        assert_eq!(ran_on(&on, true).await, std::thread::current().id());
    }
}
