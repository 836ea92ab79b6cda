//! A request body sent as the parts it was built from (docs/providers.md, "The history bytes
//! cache"): near the context window a body is megabytes, nearly all of them the history bytes
//! an adapter keeps for the session's next request. Sending those bytes as a part of their own
//! spares the copy into one buffer and, more costly, the fresh pages of a new multi-megabyte
//! buffer on every step (docs/PERFORMANCE.md, "Large steps: the body is not copied").

use std::collections::VecDeque;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use dsh_llm::SharedBytes;
use http_body::{Frame, SizeHint};

/// The parts of one request body, sent in order with their total as `Content-Length`.
#[derive(Debug, Default)]
pub struct RequestBody {
    parts: VecDeque<Bytes>,
    len: usize,
}

impl RequestBody {
    /// An empty body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes the body owns. Empty parts are left out.
    pub fn push(&mut self, part: impl Into<Bytes>) {
        let part = part.into();
        if !part.is_empty() {
            self.len += part.len();
            self.parts.push_back(part);
        }
    }

    /// Appends `range` of bytes the caller keeps as well, without copying them: the body holds
    /// them until it is sent or dropped.
    pub fn push_shared(&mut self, shared: Arc<Vec<u8>>, range: Range<usize>) {
        self.push(Bytes::from_owner(SharedVec(shared)).slice(range));
    }

    /// Appends elements of a JSON array, each written with a comma before it: the `kept`
    /// ones (uncopied, see [`RequestBody::push_shared`]), then the `fresh` ones. When no
    /// element of the array comes before them (`follows_element` false), the first one's
    /// comma is left out.
    pub fn push_elements(&mut self, follows_element: bool, kept: &SharedBytes, fresh: Vec<u8>) {
        let skip_kept = usize::from(!follows_element && !kept.is_empty());
        self.push_shared(kept.share(), skip_kept..kept.len());
        let skip_fresh = usize::from(!follows_element && kept.is_empty() && !fresh.is_empty());
        self.push(Bytes::from(fresh).slice(skip_fresh..));
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the body has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole body in one buffer (tests and callers that need the bytes themselves).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for part in &self.parts {
            out.extend_from_slice(part);
        }
        out
    }

    /// The body for the HTTP client. Up to [`RequestBody::JOIN_LIMIT`] bytes it goes as one
    /// buffer, joined if need be: the client can then send it again by itself when an HTTP/2
    /// server refuses the stream before reading it. A larger body goes as its parts, with its
    /// exact total; such a refusal then reaches the adapter's own retries.
    pub(crate) fn into_reqwest(mut self) -> reqwest::Body {
        if self.parts.len() > 1 && self.len > Self::JOIN_LIMIT {
            return reqwest::Body::wrap(self);
        }
        let whole = match self.parts.len() {
            0 => Bytes::new(),
            1 => self.parts.pop_front().unwrap_or_default(),
            _ => Bytes::from(self.to_vec()),
        };
        reqwest::Body::from(whole)
    }

    /// Largest body joined into one buffer: a copy and fresh pages that cost little below it.
    pub const JOIN_LIMIT: usize = 64 * 1024;
}

impl From<Vec<u8>> for RequestBody {
    fn from(bytes: Vec<u8>) -> Self {
        let mut body = RequestBody::new();
        body.push(bytes);
        body
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let next = self.parts.pop_front();
        if let Some(part) = &next {
            self.len -= part.len();
        }
        Poll::Ready(next.map(|part| Ok(Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len as u64)
    }
}

/// Shared bytes as the owner of a [`Bytes`] part.
struct SharedVec(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedVec {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    #[test]
    fn the_parts_make_the_body_in_order_with_their_exact_length() {
        let shared = Arc::new(b",{\"a\":1},{\"b\":2}".to_vec());
        let mut body = RequestBody::new();
        body.push(b"[".to_vec());
        body.push(Vec::new());
        body.push_shared(Arc::clone(&shared), 1..shared.len());
        body.push(&b"]"[..]);
        assert_eq!(body.to_vec(), b"[{\"a\":1},{\"b\":2}]".to_vec());
        assert_eq!(body.len(), 17);
        assert_eq!(body.size_hint().exact(), Some(17));
        assert_eq!(body.parts.len(), 3, "the empty part is left out");
    }

    #[test]
    fn array_elements_lose_their_first_comma_only_at_the_start_of_the_array() {
        let mut kept = SharedBytes::default();
        kept.extend_from_slice(b",1,2");
        for (follows, kept, fresh, expected) in [
            (false, &kept, b",3".to_vec(), &b"1,2,3"[..]),
            (true, &kept, b",3".to_vec(), b",1,2,3"),
            (false, &SharedBytes::default(), b",3".to_vec(), b"3"),
            (true, &SharedBytes::default(), b",3".to_vec(), b",3"),
            (false, &SharedBytes::default(), Vec::new(), b""),
        ] {
            let mut body = RequestBody::new();
            body.push_elements(follows, kept, fresh);
            assert_eq!(body.to_vec(), expected.to_vec(), "{follows}");
        }
    }

    #[test]
    fn a_small_body_goes_as_one_buffer_and_a_large_one_as_its_parts() {
        let mut small = RequestBody::from(b"{\"a\":".to_vec());
        small.push(b"1}".to_vec());
        assert_eq!(small.into_reqwest().as_bytes(), Some(&b"{\"a\":1}"[..]));
        let shared = Arc::new(vec![b'x'; RequestBody::JOIN_LIMIT]);
        let mut large = RequestBody::from(b"[".to_vec());
        large.push_shared(Arc::clone(&shared), 0..shared.len());
        let large = large.into_reqwest();
        assert_eq!(large.as_bytes(), None, "sent as parts, not joined");
        assert_eq!(
            Arc::strong_count(&shared),
            2,
            "the shared part was not copied"
        );
    }

    #[test]
    fn frames_come_out_in_order_and_the_shared_bytes_are_let_go_after() {
        let shared = Arc::new(b"xyz".to_vec());
        let mut body = RequestBody::from(b"ab".to_vec());
        body.push_shared(Arc::clone(&shared), 0..3);
        assert_eq!(
            Arc::strong_count(&shared),
            2,
            "the body holds the bytes, not a copy"
        );
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut body = Box::pin(body);
        let mut seen = Vec::new();
        while let Poll::Ready(Some(frame)) = body.as_mut().poll_frame(&mut cx) {
            let data = frame.unwrap().into_data().unwrap();
            seen.extend_from_slice(&data);
            assert_eq!(body.size_hint().exact(), Some(5 - seen.len() as u64));
        }
        assert!(body.is_end_stream());
        assert_eq!(seen, b"abxyz".to_vec());
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
