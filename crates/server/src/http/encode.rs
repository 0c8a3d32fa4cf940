//! Answers compressed as OpenTSDB's HTTP layer compresses them (Netty 3's
//! `HttpContentCompressor`): gzip, or deflate in zlib's wrapper, as the client's
//! `Accept-Encoding` chooses by Netty's rule ([`chosen`]); the whole answer at once, sent
//! with its length.
//!
//! Every answer is a text in memory by the time it is sent, so it is compressed in one call
//! by libdeflate at its fastest level (36-37% of the bytes of JSON answers of doubles or of
//! raw points, at 250-400 MB/s), not streamed through an encoder in small pieces: a streamed
//! encoder cost 20-100 µs a small answer and wrote a 380 KB answer at 17 MB/s. libdeflate's
//! fastest level wrote these answers in 5-9% fewer bytes than zlib's fastest (miniz_oxide's,
//! pure Rust) in 55-75% of its time; zlib-rs's fastest was as fast but wrote half as many
//! bytes again. A long gzip answer is compressed in two halves on two threads at zlib's
//! fastest level instead ([`SPLIT_BYTES`]).

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use hyper::body::Body as _;
use tower_http::compression::predicate::Predicate;

/// A coding an answer is sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Gzip,
    /// zlib's wrapper around deflate, which HTTP's `deflate` names.
    Deflate,
}

impl Coding {
    fn name(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
        }
    }
}

/// The coding Netty's `HttpContentCompressor.determineWrapper` picks for a request's
/// `Accept-Encoding`. Each comma-separated entry's quality is what follows its first `=`,
/// read as Java's `Float.valueOf` reads it (0 when it is not a number), else 1. An entry
/// containing `*` sets the wildcard's quality; one containing `gzip`, else `deflate`, raises
/// that coding's (names are matched as written, in their case). gzip when either coding's
/// quality is above 0 and gzip's is at least deflate's, deflate when it is above 0 and
/// higher; else, when the wildcard's is above 0, the first of gzip and deflate not named.
/// None: the answer is sent as it is.
pub(crate) fn chosen(headers: &HeaderMap) -> Option<Coding> {
    let accept = String::from_utf8_lossy(headers.get(header::ACCEPT_ENCODING)?.as_bytes());
    let (mut star, mut gzip, mut deflate) = (-1.0f32, -1.0f32, -1.0f32);
    for entry in accept.split(',') {
        let quality = match entry.find('=') {
            Some(at) => {
                hourglass_core::histogram::parse_java_float(&entry[at + 1..]).unwrap_or(0.0)
            }
            None => 1.0,
        };
        if entry.contains('*') {
            star = quality;
        } else if entry.contains("gzip") && quality > gzip {
            gzip = quality;
        } else if entry.contains("deflate") && quality > deflate {
            deflate = quality;
        }
    }
    if gzip > 0.0 || deflate > 0.0 {
        return Some(if gzip >= deflate {
            Coding::Gzip
        } else {
            Coding::Deflate
        });
    }
    if star > 0.0 {
        if gzip == -1.0 {
            return Some(Coding::Gzip);
        }
        if deflate == -1.0 {
            return Some(Coding::Deflate);
        }
    }
    None
}

/// Answers up to this size are compressed on the connection's thread (under about 0.3 ms);
/// larger ones on a blocking thread, so other connections served by this thread do not wait.
const INLINE_BYTES: usize = 64 * 1024;

/// `resp` as sent to a client accepting `coding`: marked as varying by `Accept-Encoding`
/// when its kind is compressed ([`super::Compressible`]), and compressed when a coding was
/// chosen and it has a body not already encoded. The answer's own body is kept until the
/// compressed one is dropped, so what it holds of the query memory budget stays held
/// until the connection has sent the answer.
pub(crate) async fn encoded(coding: Option<Coding>, mut resp: Response) -> Response {
    if !super::Compressible.should_compress(&resp) {
        return resp;
    }
    resp.headers_mut()
        .append(header::VARY, HeaderValue::from_static("accept-encoding"));
    let Some(coding) = coding else {
        return resp;
    };
    if resp.headers().contains_key(header::CONTENT_ENCODING) || resp.body().is_end_stream() {
        return resp;
    }
    let (mut parts, mut origin) = resp.into_parts();
    let mut text = Vec::with_capacity(origin.size_hint().exact().unwrap_or(0) as usize);
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut origin).poll_frame(cx)).await
    {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    text.extend_from_slice(data);
                }
            }
            Err(e) => return failed(format!("cannot read the answer: {e}")),
        }
    }
    let packed = if text.len() <= INLINE_BYTES {
        compress(coding, &text)
    } else {
        tokio::task::spawn_blocking(move || compress(coding, &text))
            .await
            .map_err(|e| e.to_string())
            .and_then(|done| done)
    };
    let packed = match packed {
        Ok(packed) => packed,
        Err(e) => return failed(format!("cannot compress the answer: {e}")),
    };
    parts.headers.insert(
        header::CONTENT_ENCODING,
        HeaderValue::from_static(coding.name()),
    );
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(packed.len()));
    Response::from_parts(
        parts,
        Body::new(Encoded {
            text: Some(Bytes::from(packed)),
            _origin: origin,
        }),
    )
}

/// Gzip answers from this size are compressed in two halves on two threads (by
/// [`split_gzip`]); smaller ones, and every deflate answer, by libdeflate on this thread.
/// Around this size the two cost the same time: libdeflate writes about 5 ns a byte cold,
/// zlib's fastest level 7, half of it on each thread, and waking the second thread costs.
const SPLIT_BYTES: usize = 128 * 1024;

/// libdeflate's fastest level that compresses (its level 0 stores the text as it is); a
/// level it refused would fail the build.
const LEVEL: libdeflater::CompressionLvl = match libdeflater::CompressionLvl::new(1) {
    Ok(level) => level,
    Err(_) => panic!("libdeflate has no level 1"),
};

/// `text` compressed whole in `coding`'s format by this thread's kept compressor, or a long
/// gzip answer by [`split_gzip`]. A new compressor costs more than a small answer's
/// compression (its tables allocated and their pages faulted in), so each thread keeps one.
fn compress(coding: Coding, text: &[u8]) -> Result<Vec<u8>, String> {
    thread_local! {
        static KEPT: std::cell::RefCell<Option<libdeflater::Compressor>> =
            const { std::cell::RefCell::new(None) };
    }
    if coding == Coding::Gzip && text.len() >= SPLIT_BYTES {
        return split_gzip(text).map_err(|e| e.to_string());
    }
    KEPT.with_borrow_mut(|kept| {
        let c = kept.get_or_insert_with(|| libdeflater::Compressor::new(LEVEL));
        let mut out = vec![
            0;
            match coding {
                Coding::Gzip => c.gzip_compress_bound(text.len()),
                Coding::Deflate => c.zlib_compress_bound(text.len()),
            }
        ];
        let len = match coding {
            Coding::Gzip => c.gzip_compress(text, &mut out),
            Coding::Deflate => c.zlib_compress(text, &mut out),
        }
        .map_err(|e| e.to_string())?;
        out.truncate(len);
        // Held until the answer is sent: its bound (the text's size and more) given back.
        out.shrink_to_fit();
        Ok(out)
    })
}

/// A long `text` as gzip, in two halves at zlib's fastest level (miniz_oxide), the second
/// on one of the kept query threads meanwhile: each half a deflate stream of its own, the
/// first ended by a sync flush (byte-aligned, not final), so the two joined are one stream
/// (the second half's matches do not reach into the first, a cost of about 1% in size).
/// libdeflate, faster on one thread, always ends its stream, so its halves cannot be joined.
fn split_gzip(text: &[u8]) -> Result<Vec<u8>, flate2::CompressError> {
    let mut out = Vec::with_capacity(text.len() / 3 + 64);
    // RFC 1952's header: deflate, no flags, no time, no extra flags, an unknown system.
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    let (first, second) = text.split_at(text.len() / 2);
    hourglass_engine::query::threads::both_written(
        &mut out,
        second.len() / 3 + 64,
        |out| kept_deflate(first, out, false),
        |part| kept_deflate(second, part, true),
    )?;
    out.extend_from_slice(&crc32fast::hash(text).to_le_bytes());
    // The text's length modulo 2^32, as the format keeps it.
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    Ok(out)
}

/// `text` through this thread's kept raw deflate compressor, appended to `out`: to the
/// stream's end when `finish`, else to a sync flush.
fn kept_deflate(text: &[u8], out: &mut Vec<u8>, finish: bool) -> Result<(), flate2::CompressError> {
    thread_local! {
        static KEPT: std::cell::RefCell<Option<flate2::Compress>> =
            const { std::cell::RefCell::new(None) };
    }
    KEPT.with_borrow_mut(|slot| {
        let c =
            slot.get_or_insert_with(|| flate2::Compress::new(flate2::Compression::fast(), false));
        c.reset();
        let done = deflate(c, text, out, finish);
        if done.is_err() {
            *slot = None;
        }
        done
    })
}

/// `text` through `c`, appended to `out`: to the stream's end when `finish`, else to a sync
/// flush once all of it was taken.
fn deflate(
    c: &mut flate2::Compress,
    text: &[u8],
    out: &mut Vec<u8>,
    finish: bool,
) -> Result<(), flate2::CompressError> {
    let flush = if finish {
        flate2::FlushCompress::Finish
    } else {
        flate2::FlushCompress::Sync
    };
    loop {
        out.reserve(1024);
        let read = usize::try_from(c.total_in())
            .unwrap_or(text.len())
            .min(text.len());
        let status = c.compress_vec(&text[read..], out, flush)?;
        let all_read = usize::try_from(c.total_in()).is_ok_and(|n| n >= text.len());
        match status {
            flate2::Status::StreamEnd => return Ok(()),
            _ if out.len() == out.capacity() => out.reserve(out.capacity()),
            _ if !finish && all_read => return Ok(()),
            _ => {}
        }
    }
}

/// A 500 answer with OpenTSDB's error shape.
fn failed(message: String) -> Response {
    axum::response::IntoResponse::into_response(super::ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        message,
    ))
}

/// A compressed answer, with the body it was made from (dropped with it).
struct Encoded {
    text: Option<Bytes>,
    _origin: Body,
}

impl hyper::body::Body for Encoded {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(
            self.get_mut()
                .text
                .take()
                .map(|t| Ok(hyper::body::Frame::data(t))),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.text.is_none()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.text.as_ref().map_or(0, |t| t.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(accept: &str) -> Option<Coding> {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_str(accept).unwrap(),
        );
        chosen(&headers)
    }

    /// Netty 3's rule, case by case.
    #[test]
    fn the_coding_is_chosen_as_netty_chooses_it() {
        use Coding::{Deflate, Gzip};
        let cases: &[(&str, Option<Coding>)] = &[
            ("gzip", Some(Gzip)),
            ("deflate", Some(Deflate)),
            ("gzip, deflate, br", Some(Gzip)),
            ("deflate, gzip", Some(Gzip)),
            ("gzip;q=0.5, deflate", Some(Deflate)),
            ("gzip;q=0.5, deflate;q=0.5", Some(Gzip)),
            ("deflate;q=0.8, gzip;q=0.2", Some(Deflate)),
            ("gzip;q=0", None),
            ("gzip;q=0, deflate;q=0", None),
            ("gzip;q=0, *", Some(Deflate)),
            ("deflate;q=0, *", Some(Gzip)),
            ("gzip;q=0, deflate;q=0, *", None),
            ("*", Some(Gzip)),
            ("*;q=0", None),
            ("br", None),
            ("identity", None),
            ("", None),
            // Names in their case, anywhere in the entry.
            ("GZIP", None),
            ("x-gzip", Some(Gzip)),
            // A quality Java cannot read is 0; Java's spellings are read.
            ("gzip;q=high", None),
            ("gzip;q=high, deflate", Some(Deflate)),
            ("gzip;q= 0.5 , deflate;q=0.4", Some(Gzip)),
            ("gzip;q=0.5f, deflate;q=0.6d", Some(Deflate)),
            ("gzip;q=NaN", None),
            ("gzip;q=NaN, *", Some(Gzip)),
            // The highest of a coding's entries counts.
            ("gzip;q=0.1, deflate;q=0.5, gzip;q=0.9", Some(Gzip)),
        ];
        for (accept, want) in cases {
            assert_eq!(pick(accept), *want, "{accept:?}");
        }
        assert_eq!(chosen(&HeaderMap::new()), None);
    }

    /// Each coding, by a kept compressor used again for texts of other sizes.
    #[test]
    fn compressed_answers_read_back() {
        use std::io::Read;
        let text: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("\"{}\":{},", 1_700_000_000 + i * 10, i % 977).into_bytes())
            .collect();
        for len in [
            text.len(),
            40,
            0,
            70_000,
            INLINE_BYTES,
            SPLIT_BYTES - 1,
            SPLIT_BYTES,
            text.len(),
        ] {
            let text = &text[..len];
            for coding in [Coding::Gzip, Coding::Deflate] {
                let packed = compress(coding, text).unwrap();
                let mut back = Vec::new();
                match coding {
                    Coding::Gzip => {
                        flate2::read::GzDecoder::new(&packed[..]).read_to_end(&mut back)
                    }
                    Coding::Deflate => {
                        flate2::read::ZlibDecoder::new(&packed[..]).read_to_end(&mut back)
                    }
                }
                .unwrap();
                assert_eq!(back, text, "{coding:?} {len}");
                if len > 1000 {
                    assert!(packed.len() < len / 2, "{} of {len}", packed.len());
                }
            }
        }
    }
}
