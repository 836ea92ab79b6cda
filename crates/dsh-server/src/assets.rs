//! The web UI: static files compiled into the binary (no build step, no network).

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

/// `(path, content type, bytes)` of every embedded file.
const FILES: &[(&str, &str, &str)] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_str!("../ui/index.html"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../ui/style.css"),
    ),
    (
        "highlight.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/highlight.js"),
    ),
    (
        "markdown.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/markdown.js"),
    ),
    (
        "render.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/render.js"),
    ),
    (
        "children.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/children.js"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../ui/app.js"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../ui/favicon.svg"),
    ),
];

fn file(name: &str) -> Response {
    match FILES.iter().find(|(path, _, _)| *path == name) {
        Some((_, content_type, body)) => {
            ([(header::CONTENT_TYPE, *content_type)], *body).into_response()
        }
        None => (StatusCode::NOT_FOUND, "not found").into_response(),
    }
}

/// `GET /`: the page.
pub(crate) async fn index() -> Response {
    file("index.html")
}

/// `GET /ui/:file`: a script, style sheet or icon.
pub(crate) async fn asset(Path(name): Path<String>) -> Response {
    file(&name)
}
