//! The line protocol: `put` lines and a few commands, one per line (`\n` or `\r\n`).
//!
//! Lines are processed a buffer at a time: consecutive `put` lines become one batch for the
//! write path, so a busy connection costs one log entry per read, not one per point. Only
//! errors are answered, in line order, in OpenTSDB's words.

mod auth_line;
mod commands;
mod histogram;
mod rollup;

pub(crate) use commands::stats_text;

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use hourglass_core::put::{PutError, PutHead, parse_put_head};
use hourglass_engine::IncomingPoint;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::activity::Activity;
use crate::auth::Access;
use crate::{State, ingest};
use hourglass_core::permission::Permission;

/// Room made for the reads of one batch: whatever is ready at once joins it, so a busy
/// collector's batch carries many lines (each batch costs one hand-off to the blocking pool).
const READ_CHUNK: usize = 256 * 1024;
/// Reads stop joining a batch when less room than this is left.
const MIN_READ_ROOM: usize = 4096;
/// A short line's length, to size a read's line list from its byte count.
const LINE_BYTES_GUESS: usize = 48;

/// What the connection does after a buffer of lines.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Continue,
    Close,
}

pub(crate) async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    state: &Arc<State>,
    mut stop: watch::Receiver<bool>,
    activity: &Activity,
    peer: Option<std::net::SocketAddr>,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::new();
    let mut session = Session::new(state, peer.map(|p| p.ip()));
    let mut out = Vec::new();
    loop {
        // Past the memory budget the socket is not read: the client's sends block on TCP
        // until flushes catch up.
        if !ingest::wait_for_room(state, activity, &mut stop).await {
            let (_, out, _) = process_blocking(state, buf, session, out, true).await?;
            stream.write_all(&out).await?;
            return Ok(());
        }
        let before = buf.len();
        // Appends after what is held (a partial line), without zeroing the room first; an
        // exact reservation keeps a connection's buffer at a chunk plus a partial line.
        buf.reserve_exact(READ_CHUNK);
        let read = tokio::select! {
            r = stream.read_buf(&mut buf) => r,
            _ = stop.changed() => {
                // Shutting down: what was read is processed, then the connection closes.
                let (_, out, _) = process_blocking(state, buf, session, out, true).await?;
                stream.write_all(&out).await?;
                return Ok(());
            }
        };
        let n = read?;
        let eof = n == 0;
        // Whatever else already arrived joins this batch: one hand-off to the blocking pool
        // for as many lines as are waiting, up to a chunk's room.
        if !eof {
            while buf.capacity() - buf.len() >= MIN_READ_ROOM {
                let more = std::future::poll_fn(|cx| {
                    let read = std::pin::pin!(stream.read_buf(&mut buf));
                    match read.poll(cx) {
                        Poll::Ready(r) => Poll::Ready(Some(r)),
                        Poll::Pending => Poll::Ready(None),
                    }
                })
                .await;
                match more {
                    Some(Ok(m)) if m > 0 => {}
                    _ => break,
                }
            }
        }
        // Nothing to do until a line is complete.
        if !eof
            && memchr::memchr(b'\n', &buf[before..]).is_none()
            && buf.len() <= state.settings.max_line_length
        {
            continue;
        }
        let (b, o, (next, s)) = process_blocking(state, buf, session, out, eof).await?;
        (buf, out, session) = (b, o, s);
        if !out.is_empty() {
            stream.write_all(&out).await?;
            out.clear();
        }
        if eof || next == Next::Close {
            let _ = stream.shutdown().await;
            return Ok(());
        }
    }
}

/// [`process`] on the blocking pool (it runs the write path), handing the buffers back.
async fn process_blocking(
    state: &Arc<State>,
    mut buf: Vec<u8>,
    mut session: Session,
    mut out: Vec<u8>,
    eof: bool,
) -> std::io::Result<(Vec<u8>, Vec<u8>, (Next, Session))> {
    ingest::run_blocking(state, move |state| {
        let next = process(state, &mut buf, &mut session, &mut out, eof);
        (buf, out, (next, session))
    })
    .await
}

/// Decodes a line: UTF-8, or ISO-8859-1 (as OpenTSDB reads every line) when it is not UTF-8.
fn decode(line: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(line) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => Cow::Owned(line.iter().map(|b| char::from(*b)).collect()),
    }
}

/// Handles every complete line in `buf` (and the rest too at end of stream), leaving a
/// partial line in place. Replies are appended to `out`.
fn process(
    state: &State,
    buf: &mut Vec<u8>,
    session: &mut Session,
    out: &mut Vec<u8>,
    eof: bool,
) -> Next {
    let discarding = &mut session.discarding;
    let max = state.settings.max_line_length;
    // Room for the lines of a read up front (collectors' lines run 50 to 150 bytes): growing
    // a batch's vectors by doubling copied them several times per read.
    let mut lines: Vec<Cow<'_, str>> = Vec::with_capacity(buf.len() / LINE_BYTES_GUESS + 1);
    let mut consumed = 0usize;
    let mut too_long = Vec::new();
    // Most reads are valid UTF-8 throughout: check once, not per line.
    let text = std::str::from_utf8(buf).ok();
    // One search over the whole read: a search a line paid its set-up each time.
    for at in memchr::memchr_iter(b'\n', buf) {
        let start = consumed;
        let mut line = &buf[consumed..at];
        consumed = at + 1;
        if std::mem::take(discarding) {
            continue; // the tail of an overlong line
        }
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        if line.len() > max {
            too_long.push((lines.len(), line.len()));
            lines.push(Cow::Borrowed(""));
            continue;
        }
        let end = start + line.len();
        lines.push(match text {
            // Slicing at ASCII `\n`/`\r` keeps char boundaries.
            Some(t) => Cow::Borrowed(t.get(start..end).unwrap_or_default()),
            None => decode(line),
        });
    }
    let rest = buf.len() - consumed;
    if eof && rest > 0 && !*discarding && rest <= max {
        lines.push(decode(&buf[consumed..]));
        consumed = buf.len();
    } else if rest > max {
        if !*discarding {
            too_long.push((lines.len(), rest));
            lines.push(Cow::Borrowed(""));
        }
        *discarding = true;
        consumed = buf.len();
    }
    let next = handle_lines(state, &mut session.login, &lines, &too_long, out);
    drop(lines);
    buf.drain(..consumed);
    next
}

fn handle_lines(
    state: &State,
    login: &mut auth_line::Login,
    lines: &[Cow<'_, str>],
    too_long: &[(usize, usize)],
    out: &mut Vec<u8>,
) -> Next {
    let mut batch = PutBatch::with_capacity(lines.len());
    let mut rollups = rollup::RollupBatch::default();
    let mut histograms = histogram::HistogramBatch::default();
    // Every line but the overlong ones is a command (counted once per read, not per line).
    state.stats.telnet_rpcs.fetch_add(
        lines.len().saturating_sub(too_long.len()) as u64,
        Ordering::Relaxed,
    );
    for (i, line) in lines.iter().enumerate() {
        if let Some((_, len)) = too_long.iter().find(|(at, _)| *at == i) {
            batch.submit(state, out);
            rollups.submit(state, out);
            histograms.submit(state, out);
            out.extend_from_slice(
                format!(
                    "put: illegal argument: line too long: {len} bytes, the limit is {} (tsd.network.max_line_length)\n",
                    state.settings.max_line_length
                )
                .as_bytes(),
            );
            continue;
        }
        // Words are split on single spaces, as OpenTSDB does: an empty line is the empty
        // command, a leading space makes the command empty too.
        let line = line.as_ref();
        let (cmd, args) = match line.strip_prefix("put ") {
            // Most lines: no search needed for the command's end.
            Some(args) => ("put", Some(args)),
            None => match memchr::memchr(b' ', line.as_bytes()) {
                // A space is one byte: both sides are on char boundaries.
                Some(at) => (&line[..at], Some(&line[at + 1..])),
                None => (line, None),
            },
        };
        let Some(granted) = login.access.as_ref() else {
            // Not authenticated yet: only `auth` is read; nothing else runs.
            batch.submit(state, out);
            rollups.submit(state, out);
            histograms.submit(state, out);
            if login.run(state, cmd, args, out) == Next::Close {
                return Next::Close;
            }
            continue;
        };
        // With authentication off (`Open`) no line pays for the permission lookup.
        if let Access::As(principal) = granted
            && let Some(needed) = needed_permission(cmd)
            && !principal.permissions.allows(needed)
        {
            batch.submit(state, out);
            rollups.submit(state, out);
            histograms.submit(state, out);
            state.stats.auth_forbidden.fetch_add(1, Ordering::Relaxed);
            reply(
                out,
                cmd,
                &format!(
                    ": permission denied: {} lacks the {needed} permission",
                    principal.name
                ),
            );
            continue;
        }
        if cmd == "put" && !state.settings.read_only {
            rollups.submit(state, out);
            histograms.submit(state, out);
            batch.add(args);
            continue;
        }
        if cmd == "rollup" && !state.settings.read_only {
            batch.submit(state, out);
            histograms.submit(state, out);
            rollups.add(args);
            continue;
        }
        if cmd == "histogram" && !state.settings.read_only {
            batch.submit(state, out);
            rollups.submit(state, out);
            histograms.add(state, args);
            continue;
        }
        batch.submit(state, out);
        rollups.submit(state, out);
        histograms.submit(state, out);
        if commands::run(state, cmd, out) == Next::Close {
            return Next::Close;
        }
    }
    batch.submit(state, out);
    rollups.submit(state, out);
    histograms.submit(state, out);
    Next::Continue
}

/// What one connection carries from one buffer of lines to the next.
#[derive(Debug)]
struct Session {
    /// The tail of an overlong line is being skipped.
    discarding: bool,
    /// Who the connection is.
    login: auth_line::Login,
}

impl Session {
    fn new(state: &State, peer: Option<std::net::IpAddr>) -> Session {
        Session {
            discarding: false,
            login: auth_line::Login::new(state, peer),
        }
    }
}

/// The permission each telnet command needs once authenticated; commands not listed
/// (`version`, `help`, `exit`, unknown ones) need none.
const COMMAND_PERMISSIONS: &[(&str, Permission)] = &[
    ("put", Permission::Write),
    ("rollup", Permission::Write),
    ("histogram", Permission::Write),
    ("stats", Permission::Admin),
    ("dropcaches", Permission::Admin),
    ("diediedie", Permission::Admin),
];

fn needed_permission(cmd: &str) -> Option<Permission> {
    COMMAND_PERMISSIONS
        .iter()
        .find(|(c, _)| *c == cmd)
        .map(|(_, p)| *p)
}

/// Consecutive `put` lines waiting to be written as one batch. Their tags stay as written:
/// the write path reads them only for series it does not know by that text.
#[derive(Debug)]
struct PutBatch<'a> {
    lines: Vec<Result<PutHead<'a>, PutError>>,
}

impl<'a> PutBatch<'a> {
    fn with_capacity(lines: usize) -> PutBatch<'a> {
        PutBatch {
            lines: Vec::with_capacity(lines),
        }
    }

    /// A `put` line: `args` is what follows `put `, `None` for a bare `put`.
    fn add(&mut self, args: Option<&'a str>) {
        let parsed = match args {
            Some(args) => parse_put_head(args),
            None => Err(PutError::not_enough_arguments(0)),
        };
        self.lines.push(parsed);
    }

    fn submit(&mut self, state: &State, out: &mut Vec<u8>) {
        if self.lines.is_empty() {
            return;
        }
        // `tsd.rpc.received type=put` counts HTTP put requests only, as OpenTSDB's does;
        // telnet lines are `type=telnet`.
        let stats = &state.stats;
        stats
            .points_received
            .fetch_add(self.lines.len() as u64, Ordering::Relaxed);
        let mut points = Vec::with_capacity(self.lines.len());
        let mut origin = Vec::with_capacity(self.lines.len());
        for (i, line) in self.lines.iter().enumerate() {
            if let Ok(p) = line {
                points.push(IncomingPoint {
                    metric: p.metric,
                    timestamp: p.timestamp,
                    value: p.value,
                    tags: &[],
                    line_tags: Some(p.tags_text),
                });
                origin.push(i);
            }
        }
        // Refused whole past the memory budget: wait for room and send it again (the
        // connection is not read meanwhile), unless the server is stopping.
        let outcome = loop {
            let outcome = state.tsdb.add_points(&points);
            if !outcome.throttled || !ingest::block_for_room(state) {
                break outcome;
            }
        };
        if outcome.throttled {
            stats.throttled.fetch_add(1, Ordering::Relaxed);
        }
        let mut engine_errors = outcome.errors.into_iter().peekable();
        for (i, line) in self.lines.iter().enumerate() {
            match line {
                Err(PutError::InvalidValue(m)) => {
                    stats.invalid_values.fetch_add(1, Ordering::Relaxed);
                    reply(out, "put: invalid value: ", m);
                }
                Err(PutError::IllegalArgument(m)) => {
                    stats.illegal_arguments.fetch_add(1, Ordering::Relaxed);
                    reply(out, "put: illegal argument: ", m);
                }
                Ok(_) => {
                    while let Some((idx, e)) = engine_errors.next_if(|(idx, _)| origin[*idx] <= i) {
                        if origin[idx] != i {
                            continue;
                        }
                        stats.count_error(&e);
                        let refused = crate::http::PointError::of(&e);
                        if !refused.storage || state.settings.telnet_return_errors {
                            reply(out, "", &refused.telnet);
                        }
                    }
                }
            }
        }
        self.lines.clear();
    }
}

fn reply(out: &mut Vec<u8>, prefix: &str, msg: &str) {
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(msg.as_bytes());
    out.push(b'\n');
}
