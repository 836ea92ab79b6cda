//! The HTTP API handlers (reference: `docs/web.md`). Every error is `{"error": {code, message}}`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use dsh_agent::{ApprovalDecision, UserAnswer};
use dsh_llm::ReasoningEffort;
use dsh_protocol::{Op, Reply, Waiting};
use dsh_session::SessionTitle;
use dsh_tools::PermissionPreset;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::security::Access;
use crate::sessions::{check_id, OpenRequest, Sessions};

/// What the handlers share.
pub(crate) struct AppState {
    /// The session registry.
    pub sessions: Arc<Sessions>,
    /// Where new sessions go when the request names no directory.
    pub default_cwd: PathBuf,
    /// Launch codes and sign-ins (for `POST /api/launch`).
    pub access: Arc<Access>,
}

/// How long a launch code minted by `POST /api/launch` stays valid while unused.
const SHARED_CODE_TTL: std::time::Duration = std::time::Duration::from_secs(600);

type Shared = State<Arc<AppState>>;
type ApiResult = Result<Response, ApiError>;

/// Parses a JSON body; an empty body is `T::default()`.
fn parse<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|err| ApiError::bad_request(format!("bad JSON body: {err}")))
}

/// `GET /api/info`.
pub(crate) async fn info(State(state): Shared) -> ApiResult {
    Ok(Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "defaultCwd": state.default_cwd.to_string_lossy(),
        "models": state.sessions.models(),
        "efforts": ["off", "low", "medium", "high", "max"],
        "modelEfforts": crate::effort::model_efforts(&state.sessions),
        "permissions": PermissionPreset::ALL.map(PermissionPreset::as_str),
        "prices": state.sessions.prices.models,
    }))
    .into_response())
}

/// Sessions in a page of `GET /api/sessions` that names no `limit`.
pub(crate) const SESSION_PAGE: usize = 100;

/// The most sessions one page of `GET /api/sessions` holds, whatever `limit` asks: a history
/// of 10,000 sessions served whole left the server 38 MiB of heap (RssAnon) it kept after the
/// response was sent (docs/PERFORMANCE.md, "Session listing").
pub(crate) const SESSION_PAGE_MAX: usize = 500;

/// `GET /api/sessions[?limit=N&after=CURSOR]`: one page of the sessions, grouped by workspace,
/// most recently updated first, and `next`, the cursor of the following page (`null` after the
/// last). A page holds `limit` sessions ([`SESSION_PAGE`] without it, at most
/// [`SESSION_PAGE_MAX`]). The pages come from the session catalog (docs/sessions.md, "Paged
/// listing"), which this server keeps in line with the logs by watching the session folders
/// ("Watched listing"): a page costs the events since the last one, not a walk of every folder.
pub(crate) async fn list(State(state): Shared, RawQuery(query): RawQuery) -> ApiResult {
    let limit = query_value(query.as_deref(), "limit")
        .map(|v| {
            v.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| ApiError::bad_request("`limit` must be a positive number"))
        })
        .transpose()?
        .unwrap_or(SESSION_PAGE)
        .min(SESSION_PAGE_MAX);
    let after = query_value(query.as_deref(), "after")
        .map(percent_decode)
        .transpose()?;
    let page = dsh_session::ListPage {
        limit: Some(limit),
        after,
    };
    let listing = state.sessions.list_page(page).await?;
    let prices = &state.sessions.prices;
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut order: Vec<(u64, String)> = Vec::new();
    for summary in &listing.sessions {
        let usage = summary.usage();
        let live = state.sessions.live(&summary.id).is_some();
        let entry = json!({
            "id": summary.id,
            "title": summary.title,
            "createdAt": summary.created_at,
            "updatedAt": summary.updated_at,
            "turns": summary.turns,
            "tokens": usage.usage.input_tokens + usage.usage.cache_read_tokens
                + usage.usage.cache_write_tokens + usage.usage.output_tokens,
            "costUsd": summary.cost(prices),
            "parentSession": summary.parent_session,
            "live": live,
            "running": live && state.sessions.running(&summary.id),
        });
        let group = groups.entry(summary.cwd.clone()).or_default();
        if group.is_empty() {
            order.push((summary.updated_at, summary.cwd.clone()));
        }
        group.push(entry);
    }
    order.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    let workspaces: Vec<Value> = order
        .into_iter()
        .map(|(_, cwd)| {
            let sessions = groups.remove(&cwd).unwrap_or_default();
            json!({"cwd": cwd, "sessions": sessions})
        })
        .collect();
    Ok(Json(json!({
        "workspaces": workspaces,
        "problems": listing.problems,
        "next": listing.next,
    }))
    .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CreateBody {
    cwd: Option<String>,
    model: Option<String>,
    effort: Option<String>,
    prompt: Option<String>,
}

fn check_effort(effort: &Option<String>) -> Result<(), ApiError> {
    match effort {
        Some(text) if ReasoningEffort::parse(text).is_none() => Err(ApiError::bad_request(
            format!("unknown effort `{text}` (expected off, low, medium, high or max)"),
        )),
        _ => Ok(()),
    }
}

/// Refuses an effort the session's model does not take, with the supported list, before the
/// session is created (docs/web.md, "Model and effort"); unknown models are not checked here.
async fn check_model_effort(state: &AppState, request: &OpenRequest) -> Result<(), ApiError> {
    let Some(effort) = request.effort.as_deref().and_then(ReasoningEffort::parse) else {
        return Ok(());
    };
    let sessions = Arc::clone(&state.sessions);
    let request = request.clone();
    // Resolving the configuration may read files.
    let info = tokio::task::spawn_blocking(move || {
        let model = request
            .model
            .clone()
            .or_else(|| sessions.default_model(&request))?;
        sessions.model_info(&model)
    })
    .await
    .map_err(|err| ApiError::internal(format!("checking the effort failed: {err}")))?;
    match info {
        Some(info) => info.check_effort(effort).map_err(|message| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "UNSUPPORTED_REASONING_EFFORT",
                message,
            )
        }),
        None => Ok(()),
    }
}

/// `POST /api/sessions {cwd?, model?, effort?, prompt?}`: a new live session.
pub(crate) async fn create(State(state): Shared, body: Bytes) -> ApiResult {
    let body: CreateBody = parse(&body)?;
    check_effort(&body.effort)?;
    let cwd = body
        .cwd
        .filter(|c| !c.trim().is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| state.default_cwd.clone());
    let cwd = std::fs::canonicalize(&cwd)
        .ok()
        .filter(|dir| dir.is_dir())
        .ok_or_else(|| {
            ApiError::bad_request(format!("{} is not an existing directory", cwd.display()))
        })?;
    let request = OpenRequest {
        cwd,
        resume: None,
        model: body.model.filter(|m| !m.trim().is_empty()),
        effort: body.effort,
    };
    check_model_effort(&state, &request).await?;
    let id = state.sessions.create(request).await?;
    if let Some(prompt) = body.prompt.filter(|p| !p.trim().is_empty()) {
        if let Some(live) = state.sessions.live(&id) {
            live.submit(Op::Prompt(dsh_agent::new_user_message(prompt)))?;
        }
    }
    Ok((StatusCode::CREATED, Json(json!({"id": id}))).into_response())
}

/// The working directory a trust request names (`default_cwd` when none), as an existing
/// canonical directory.
fn trust_cwd(state: &AppState, cwd: Option<&str>) -> Result<PathBuf, ApiError> {
    let cwd = cwd
        .filter(|c| !c.trim().is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| state.default_cwd.clone());
    std::fs::canonicalize(&cwd)
        .ok()
        .filter(|dir| dir.is_dir())
        .ok_or_else(|| {
            ApiError::bad_request(format!("{} is not an existing directory", cwd.display()))
        })
}

/// `GET /api/trust?cwd=...`: whether the workspace of `cwd` has project settings that apply
/// only once trusted, the exact review (docs/configuration.md, "Workspace trust") and the pin
/// to send back with `POST /api/trust`.
pub(crate) async fn trust_review(State(state): Shared, RawQuery(query): RawQuery) -> ApiResult {
    let cwd = query_value(query.as_deref(), "cwd")
        .map(percent_decode)
        .transpose()?;
    let cwd = trust_cwd(&state, cwd.as_deref())?;
    let home = state.sessions.home().to_path_buf();
    let body = tokio::task::spawn_blocking(move || -> Result<Value, ApiError> {
        let inspected = inspect_trust(&home, &cwd)?;
        let review = dsh_runtime::trust::review(&inspected, &cwd);
        let files: Vec<Value> = review
            .files
            .iter()
            .map(|f| {
                json!({
                    "file": f.file.to_string_lossy(),
                    "kind": if f.hooks { "hooks" } else if f.command { "command" } else { "config" },
                    "lines": f.lines,
                })
            })
            .collect();
        let env = review.env.as_ref().map(|env| {
            json!({
                "file": env.file.to_string_lossy(),
                "names": env.names,
                "note": dsh_runtime::trust::env_note(env),
            })
        });
        Ok(json!({
            "cwd": cwd.to_string_lossy(),
            "workspace": inspected.workspace.to_string_lossy(),
            "needsTrust": inspected.has_ignored() && inspected.trusted.is_none(),
            "trusted": inspected.trusted.is_some(),
            "changedSinceTrusted": inspected.changed_since_trusted,
            "pin": inspected.pin,
            "files": files,
            "env": env,
            "text": review.text(),
        }))
    })
    .await
    .map_err(|err| ApiError::internal(format!("a trust task failed: {err}")))??;
    Ok(Json(body).into_response())
}

fn inspect_trust(
    home: &std::path::Path,
    cwd: &std::path::Path,
) -> Result<dsh_runtime::trust::WorkspaceTrust, ApiError> {
    dsh_runtime::trust::inspect(home, cwd).map_err(|message| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "INVALID_CONFIG",
            format!("{message}; fix the project file, then review again"),
        )
    })
}

/// `%XX` and `+` of a query value decoded (UTF-8).
fn percent_decode(text: &str) -> Result<String, ApiError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| ApiError::bad_request("bad %-escape in the query"))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request("the query is not UTF-8"))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TrustBody {
    cwd: Option<String>,
    pin: Option<String>,
    confirm: bool,
    /// A live session of that workspace to reopen with the settings applied.
    session: Option<String>,
}

/// `POST /api/trust {cwd, pin, confirm: true, session?}`: records trust in the workspace of
/// `cwd` only if its project files still hash to `pin` (else 409 `CHANGED`, nothing recorded);
/// then forgets the configurations resolved there and reopens `session` if given.
pub(crate) async fn trust(State(state): Shared, body: Bytes) -> ApiResult {
    let body: TrustBody = parse(&body)?;
    if !body.confirm {
        return Err(ApiError::bad_request(
            "trusting a workspace needs `confirm: true` (the user confirmed the review)",
        ));
    }
    let Some(pin) = body.pin.filter(|p| !p.is_empty()) else {
        return Err(ApiError::bad_request(
            "`pin` is missing: send the pin of the review shown (GET /api/trust)",
        ));
    };
    let cwd = trust_cwd(&state, body.cwd.as_deref())?;
    let home = state.sessions.home().to_path_buf();
    let recorded =
        tokio::task::spawn_blocking(move || dsh_runtime::trust::record_pinned(&home, &cwd, &pin))
            .await
            .map_err(|err| ApiError::internal(format!("a trust task failed: {err}")))?;
    let workspace = match recorded {
        Ok(workspace) => workspace,
        Err(dsh_runtime::trust::TrustError::Changed) => {
            return Err(ApiError::conflict(
                "CHANGED",
                "the project files changed since shown; review them again",
            ))
        }
        Err(dsh_runtime::trust::TrustError::Invalid(message)) => {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "INVALID_CONFIG",
                message,
            ))
        }
    };
    state.sessions.trusted(&workspace);
    let mut reopened = Value::Null;
    if let Some(id) = body.session.filter(|s| !s.is_empty()) {
        state.sessions.reopen(&id).await?;
        reopened = json!(id);
    }
    Ok(Json(json!({
        "trusted": true,
        "workspace": workspace.to_string_lossy(),
        "reopened": reopened,
    }))
    .into_response())
}

/// `GET /api/sessions/:id`: live state of a session (model, effort, permission, queue).
pub(crate) async fn detail(State(state): Shared, Path(id): Path<String>) -> ApiResult {
    let feed = state.sessions.feed(&id).await?;
    let Some(live) = state.sessions.live(&id) else {
        return Ok(Json(json!({
            "id": id, "live": false, "running": false, "events": feed.len(),
        }))
        .into_response());
    };
    let call = live.call();
    let (next_turn, next_step) = live.handle.pending();
    let texts = |messages: Vec<dsh_llm::Message>| -> Vec<String> {
        messages.iter().map(|m| m.text()).collect()
    };
    Ok(Json(json!({
        "id": id,
        "live": true,
        "running": feed.running(),
        "events": feed.len(),
        "cwd": live.cwd.to_string_lossy(),
        "provider": call.provider,
        "model": call.model,
        "effort": call.reasoning_effort.map(|e| e.as_str()),
        "permission": live.handle.permission().as_str(),
        // The model takes images: the composer offers the image button only then.
        "images": live.handle.takes_images(),
        "pending": {"nextTurn": texts(next_turn), "nextStep": texts(next_step)},
        "approvals": waiting(&live, true),
        "questions": waiting(&live, false),
    }))
    .into_response())
}

/// `GET /api/sessions/:id/events`: the log as server-sent events (`id: <seq>`), then live
/// events. `Last-Event-ID: n` (or `?from=n+1`) resumes after seq `n`.
pub(crate) async fn events(
    State(state): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let feed = state.sessions.feed(&id).await?;
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| ApiError::bad_request("Last-Event-ID must be a seq"))
        })
        .transpose()?;
    let from_query = query_value(query.as_deref(), "from")
        .map(|v| {
            v.parse::<usize>()
                .map_err(|_| ApiError::bad_request("`from` must be a seq"))
        })
        .transpose()?;
    let from = match (last, from_query) {
        (Some(seq), _) => seq.saturating_add(1),
        (None, Some(from)) => from,
        (None, None) => 0,
    };
    let stream = feed.stream(from, state.sessions.shutdown.clone());
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn query_value<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptBody {
    text: String,
    mode: Option<String>,
    #[serde(default)]
    images: Vec<PromptImage>,
}

/// One image of a prompt, as dsh's web client sends it (`EncodedImageAttachment`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PromptImage {
    media_type: String,
    data: String,
    name: Option<String>,
}

/// Most images one prompt carries.
pub(crate) const MAX_PROMPT_IMAGES: usize = 20;

/// Largest prompt body: room for a few 20 MB images in base64 (docs/web.md, "Images").
pub(crate) const MAX_PROMPT_BODY_BYTES: usize = 100 * 1024 * 1024;

/// The prompt's images as image blocks, each checked like every image (`docs/model-calls.md`,
/// "Images"); the first bad one refuses the whole prompt, naming it.
fn prompt_images(images: Vec<PromptImage>) -> Result<Vec<dsh_llm::ContentBlock>, ApiError> {
    use base64::Engine as _;
    if images.len() > MAX_PROMPT_IMAGES {
        return Err(ApiError::bad_request(format!(
            "{} images attached; a prompt takes at most {MAX_PROMPT_IMAGES}",
            images.len()
        )));
    }
    images
        .into_iter()
        .enumerate()
        .map(|(i, image)| {
            let label = image
                .name
                .clone()
                .unwrap_or_else(|| format!("image {}", i + 1));
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(image.data.trim())
                .map_err(|e| {
                    ApiError::bad_request(format!("{label}: `data` is not standard base64 ({e})"))
                })?;
            dsh_llm::ImageAttachment::from_declared(bytes, &image.media_type, image.name.as_deref())
                .map(|attachment| dsh_llm::ContentBlock::Image { attachment })
                .map_err(|e| ApiError::bad_request(format!("{label}: {e}")))
        })
        .collect()
}

/// `POST /api/sessions/:id/prompt {text, mode?: "followup" | "steer", images?}`: queues input,
/// opening a stored session first (resume).
pub(crate) async fn prompt(State(state): Shared, Path(id): Path<String>, body: Bytes) -> ApiResult {
    let body: PromptBody = parse(&body)?;
    let images = prompt_images(body.images)?;
    if body.text.trim().is_empty() && images.is_empty() {
        return Err(ApiError::bad_request("the prompt is empty"));
    }
    let mode = body.mode.unwrap_or_else(|| "followup".into());
    let live = state.sessions.ensure_live(&id).await?;
    let mut message = dsh_agent::new_user_message(body.text.clone());
    if body.text.trim().is_empty() {
        // Images alone: no empty text block before them.
        message.content.clear();
    }
    message.content.extend(images);
    let op = match mode.as_str() {
        "followup" => Op::Prompt(message),
        "steer" => Op::Steer(message),
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown mode `{other}` (expected followup or steer)"
            )))
        }
    };
    live.submit(op)?;
    Ok((StatusCode::ACCEPTED, Json(json!({"queued": mode}))).into_response())
}

/// `GET /api/sessions/:id/images/:hex.:ext`: an image file of the session (the transcript's
/// thumbnails; docs/web.md, "Images"). Only names of the form `<64 hex>.<png|jpg|gif|webp>` are
/// served, from that session's image folder, with their media type.
pub(crate) async fn image(
    State(state): Shared,
    Path((id, file)): Path<(String, String)>,
) -> ApiResult {
    crate::sessions::check_id(&id)?;
    let (hex, ext) = file.split_once('.').unwrap_or(("", ""));
    let media_type = dsh_llm::extension_media_type(ext);
    let valid = hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let (true, Some(media_type)) = (valid, media_type) else {
        return Err(ApiError::bad_request(format!(
            "`{file}` is not an image file name (`<sha256 hex>.<png|jpg|gif|webp>`)"
        )));
    };
    let data = state
        .sessions
        .with_store(move |store| {
            let path = store.blobs(&id)?.dir().join(&file);
            std::fs::read(&path)
                .map_err(|_| ApiError::not_found(format!("session {id} has no image {file}")))
        })
        .await?;
    Ok((
        StatusCode::OK,
        [
            (axum::http::header::CONTENT_TYPE, media_type),
            (
                axum::http::header::CACHE_CONTROL,
                "private, max-age=31536000, immutable",
            ),
        ],
        data,
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CancelBody {
    keep_inbox: Option<bool>,
}

/// `POST /api/sessions/:id/cancel {keepInbox?}`: cancels the running turn.
pub(crate) async fn cancel(State(state): Shared, Path(id): Path<String>, body: Bytes) -> ApiResult {
    check_id(&id)?;
    let body: CancelBody = parse(&body)?;
    let cancelled = match state.sessions.live(&id) {
        Some(live) => {
            // Whether a turn was open, as the session's events say.
            let running = state.sessions.running(&id);
            live.submit(Op::Cancel {
                keep_queued: body.keep_inbox.unwrap_or(false),
            })?;
            running
        }
        None => false,
    };
    Ok(Json(json!({"cancelled": cancelled})).into_response())
}

/// `POST /api/sessions/:id/warm`: the user started a message in an idle session; its provider
/// connection is opened again in the background, unless it is still open (docs/web.md,
/// "Connection warm-up"). `{"live": false}` when no agent runs for the session (nothing is
/// opened for a stored one: its first send opens the session, which connects).
pub(crate) async fn warm(State(state): Shared, Path(id): Path<String>) -> ApiResult {
    check_id(&id)?;
    let live = state.sessions.live(&id);
    if let Some(live) = &live {
        live.preconnect.warm();
    }
    Ok(Json(json!({"live": live.is_some()})).into_response())
}

/// `POST /api/sessions/:id/compact`: compacts before the next step (or at once when idle).
pub(crate) async fn compact(State(state): Shared, Path(id): Path<String>) -> ApiResult {
    let live = state.sessions.ensure_live(&id).await?;
    live.submit(Op::Compact)?;
    Ok((StatusCode::ACCEPTED, Json(json!({"requested": true}))).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallBody {
    model: Option<String>,
    effort: Option<String>,
}

/// `POST /api/sessions/:id/call {model?, effort?}`: switches model or effort from the next
/// request on (`effort: "default"` returns to the model's default).
pub(crate) async fn set_call(
    State(state): Shared,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body: CallBody = parse(&body)?;
    let effort = match body.effort.as_deref() {
        None => None,
        Some("default") | Some("") => Some(None),
        Some(text) => Some(Some(ReasoningEffort::parse(text).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown effort `{text}` (expected default, off, low, medium, high or max)"
            ))
        })?)),
    };
    let live = state.sessions.ensure_live(&id).await?;
    let model = body
        .model
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty());
    // Both at once: the effort is checked against the new model before anything changes.
    if let (Some(model), Some(Some(wanted))) = (&model, effort) {
        if let Some(info) = state.sessions.model_info(model) {
            info.check_effort(wanted).map_err(|message| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "UNSUPPORTED_REASONING_EFFORT",
                    message,
                )
            })?;
        }
    }
    // Only efforts the model takes: refused before any request, and a model switch carries a
    // valid one (docs/web.md, "Model and effort"); the protocol decides both.
    let mut notes = Vec::new();
    if let Some(model) = model.filter(|m| *m != live.call().model) {
        // The first note says the model is set; the rest, that its effort changed.
        notes.extend(live.submit(Op::SetModel(model))?.into_iter().skip(1));
    }
    if let Some(effort) = effort {
        live.submit(Op::SetEffort(effort))?;
    }
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    let call = live.call();
    Ok(Json(json!({
        "model": call.model,
        "effort": call.reasoning_effort.map(|e| e.as_str()),
        "images": live.handle.takes_images(),
        "note": note,
    }))
    .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ApprovalBody {
    decision: String,
    message: Option<String>,
}

/// `POST /api/sessions/:id/approvals/:approval {decision: "allow" | "allow_session" |
/// "allow_always" | "reject", message?}`.
pub(crate) async fn approve(
    State(state): Shared,
    Path((id, approval)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    check_id(&id)?;
    let body: ApprovalBody = parse(&body)?;
    let decision = match body.decision.as_str() {
        "allow" | "allow_once" => ApprovalDecision::AllowOnce,
        // Honoured only when the question offered it (`choices` of `approval/asked`);
        // otherwise the agent treats it as allow once.
        "allow_session" => ApprovalDecision::AllowSession,
        "allow_always" => ApprovalDecision::AllowAlways,
        "reject" => ApprovalDecision::Reject {
            message: body
                .message
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| "the user rejected this call".to_string()),
        },
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown decision `{other}` (expected allow, allow_session, allow_always or reject)"
            )))
        }
    };
    let not_waiting = || {
        ApiError::not_found(format!(
            "no approval `{approval}` is waiting in session {id}"
        ))
    };
    let live = state.sessions.live(&id).ok_or_else(not_waiting)?;
    match live.control.submit(Op::Approve {
        id: approval.clone(),
        decision,
    }) {
        Ok(_) => Ok(Json(json!({"answered": true})).into_response()),
        Err(err) if err.code == "NOT_WAITING" => Err(not_waiting()),
        Err(err) => Err(err.into()),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ForkBody {
    at_turn: Option<u64>,
}

/// `POST /api/sessions/:id/fork {atTurn?}`: a new session seeded up to the end of that turn
/// (default: the last closed turn).
pub(crate) async fn fork(State(state): Shared, Path(id): Path<String>, body: Bytes) -> ApiResult {
    check_id(&id)?;
    let body: ForkBody = parse(&body)?;
    let header = state
        .sessions
        .with_store(move |store| Ok(dsh_session::fork(store, &id, body.at_turn)?))
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(
            json!({"id": header.id, "parentSession": header.parent_session,
                    "seedLength": header.seed_length}),
        ),
    )
        .into_response())
}

/// `GET /api/sessions/:id/export?format=md|jsonl`: a download of the stored log.
pub(crate) async fn export(
    State(state): Shared,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let format = query_value(query.as_deref(), "format").unwrap_or("md");
    let log = state.sessions.load(&id).await?;
    let (body, content_type, extension) = match format {
        "md" => (
            dsh_session::export_markdown(&log).into_bytes(),
            "text/markdown; charset=utf-8",
            "md",
        ),
        "jsonl" => (
            dsh_session::encode_jsonl(&log.header, &log.events, false)?,
            "application/x-ndjson",
            "jsonl",
        ),
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown format `{other}` (expected md or jsonl)"
            )))
        }
    };
    let disposition = format!(
        "attachment; filename=\"session-{}.{extension}\"",
        log.header.id
    );
    Ok((
        [
            (header::CONTENT_TYPE, content_type.to_string()),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        body,
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TitleBody {
    title: String,
}

/// `POST /api/sessions/:id/title {title}`: renames (a `session/title` event, source user),
/// through the live agent when there is one.
pub(crate) async fn rename(State(state): Shared, Path(id): Path<String>, body: Bytes) -> ApiResult {
    let body: TitleBody = parse(&body)?;
    let title: String = body.title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() || title.chars().count() > 200 {
        return Err(ApiError::bad_request("a title has 1 to 200 characters"));
    }
    state
        .sessions
        .rename(
            &id,
            SessionTitle {
                title: title.clone(),
                message_seqs: Vec::new(),
                source: Some(json!({"kind": "user"})),
            },
        )
        .await?;
    Ok(Json(json!({"title": title})).into_response())
}

/// `POST /api/launch`: a new one-time launch code for another browser (only a signed-in
/// client gets here), valid for ten minutes while unused.
pub(crate) async fn launch(State(state): Shared) -> ApiResult {
    let code = state.access.issue_code(None, Some(SHARED_CODE_TTL));
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "path": format!("/?code={}", code.as_str()),
            "expiresInSecs": SHARED_CODE_TTL.as_secs(),
        })),
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PermissionBody {
    preset: String,
    /// The user confirmed a widening in the UI.
    #[serde(default)]
    confirm: bool,
}

/// `POST /api/sessions/:id/permission {preset, confirm?}`: switches the permission preset;
/// logged at once (`permission/preset`, `sandbox/mode`), applied from the next step on. A
/// widening (to a preset of higher [`PermissionPreset::rank`]: read-only -> ask ->
/// workspace-write -> danger-full-access; leaving `ask` for `workspace-write` drops the
/// approvals, so it widens too) needs `confirm:
/// true`, which the UI sends only after the user said yes in a dialog (docs/web.md).
pub(crate) async fn set_permission(
    State(state): Shared,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body: PermissionBody = parse(&body)?;
    let preset: PermissionPreset = body.preset.trim().parse().map_err(ApiError::bad_request)?;
    let live = state.sessions.ensure_live(&id).await?;
    let current = live.handle.permission();
    if preset.rank() > current.rank() && !body.confirm {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "CONFIRMATION_REQUIRED",
            format!(
                "switching from {current} to {preset} widens what the model's tools may do; \
                 the user must confirm it in the UI, which then sends `\"confirm\": true`. \
                 The session keeps {current}"
            ),
        ));
    }
    live.submit(Op::SetPreset(preset))?;
    Ok(Json(json!({"permission": live.handle.permission().as_str()})).into_response())
}

/// What waits for the user in `live`: the ids of approval questions (`approvals`), else the
/// call ids of the tool calls whose questions (or plan review) wait.
fn waiting(live: &crate::sessions::LiveSession, approvals: bool) -> Vec<String> {
    live.control
        .interactions()
        .waiting()
        .into_iter()
        .filter_map(|waiting| match waiting {
            Waiting::Approval(request) if approvals => Some(request.id),
            Waiting::Question(request) if !approvals => Some(request.call_id),
            _ => None,
        })
        .collect()
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerEntry {
    id: String,
    #[serde(default)]
    answers: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuestionBody {
    answers: Option<Vec<AnswerEntry>>,
    decline: Option<String>,
}

/// `POST /api/sessions/:id/questions/:callId {answers: [{id, answers}]} | {decline}`: answers
/// (or dismisses) the questions of a waiting `ask_user_question` call.
pub(crate) async fn answer_question(
    State(state): Shared,
    Path((id, call_id)): Path<(String, String)>,
    body: Bytes,
) -> ApiResult {
    check_id(&id)?;
    let body: QuestionBody = parse(&body)?;
    let reply = match (body.answers, body.decline) {
        (Some(answers), None) => Reply::Answers(
            answers
                .into_iter()
                .map(|a| UserAnswer {
                    id: a.id,
                    answers: a.answers,
                })
                .collect(),
        ),
        (None, Some(message)) => Reply::Decline(message),
        _ => return Err(ApiError::bad_request("give either `answers` or `decline`")),
    };
    let not_waiting = || {
        ApiError::not_found(format!(
            "no question `{call_id}` is waiting in session {id}"
        ))
    };
    let live = state.sessions.live(&id).ok_or_else(not_waiting)?;
    let answered = matches!(reply, Reply::Answers(_));
    // The stream shows the question (`questionAsked`) as its `tool/started` is logged, a moment
    // before the tool asks: an answer in that moment waits for the question (docs/web.md,
    // "Questions (`ask_user_question`)").
    let deadline = tokio::time::Instant::now() + QUESTION_GRACE;
    loop {
        let op = Op::Answer {
            call_id: call_id.clone(),
            reply: reply.clone(),
        };
        match live.control.submit(op) {
            Ok(_) => {
                return Ok(
                    Json(json!({"answered": answered, "declined": !answered})).into_response()
                )
            }
            Err(err) if err.code == "NOT_WAITING" => {
                let asked = match state.sessions.feed(&id).await {
                    Ok(feed) => feed.asking(&call_id),
                    Err(_) => false,
                };
                if !asked || tokio::time::Instant::now() >= deadline {
                    return Err(not_waiting());
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(err) => return Err(err.into()),
        }
    }
}

/// How long an answer waits for a question whose call is shown but not asked yet.
const QUESTION_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// `GET /api/sessions/:id/commands`: the slash commands the session's extensions offer
/// (user-invocable skills); empty for a stored session, whose extensions are not loaded.
pub(crate) async fn commands(State(state): Shared, Path(id): Path<String>) -> ApiResult {
    check_id(&id)?;
    // Unknown ids are 404 like everywhere else.
    state.sessions.feed(&id).await?;
    let live = state.sessions.live(&id);
    let commands: Vec<Value> = live
        .as_ref()
        .map(|live| live.handle.user_commands())
        .unwrap_or_default()
        .into_iter()
        .map(|c| json!({"name": c.name, "description": c.description, "hint": c.hint}))
        .collect();
    Ok(Json(json!({"live": live.is_some(), "commands": commands})).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandBody {
    name: String,
    #[serde(default)]
    arguments: String,
}

/// `POST /api/sessions/:id/commands {name, arguments?}`: runs `/name arguments`, queued as the
/// next turn's input like a follow-up; opens a stored session first.
pub(crate) async fn run_command(
    State(state): Shared,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body: CommandBody = parse(&body)?;
    let name = body.name.trim().trim_start_matches('/').to_string();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(ApiError::bad_request(format!(
            "`{}` is not a command name",
            body.name
        )));
    }
    let live = state.sessions.ensure_live(&id).await?;
    let notes = live.submit(Op::Command {
        name: name.clone(),
        arguments: body.arguments.trim().to_string(),
    })?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"queued": "followup", "command": name, "notes": notes})),
    )
        .into_response())
}

/// `POST /api/sessions/:id/undo`: reverts the file changes `write` and `edit` made in the
/// latest turn that has some and was not undone yet (docs/protocol.md, "Undo"); `409
/// UNDO_REFUSED` with the reason when nothing is undone. Opens a stored session first.
pub(crate) async fn undo(State(state): Shared, Path(id): Path<String>) -> ApiResult {
    let live = state.sessions.ensure_live(&id).await?;
    let notes = live.submit(Op::Undo)?;
    Ok(Json(json!({"undone": true, "message": notes.join("; ")})).into_response())
}

/// `POST /api/sessions/:id/plan {active}`: enters or leaves plan mode (docs/web.md, "Plan
/// mode"); `400` when the session has no plan mode. Opens a stored session first.
pub(crate) async fn plan_mode(
    State(state): Shared,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body: PlanBody = parse(&body)?;
    let live = state.sessions.ensure_live(&id).await?;
    live.submit(Op::SetPlanMode(body.active))?;
    Ok((StatusCode::ACCEPTED, Json(json!({"planMode": body.active}))).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanBody {
    active: bool,
}

/// Any other path.
pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no such API route")
}
