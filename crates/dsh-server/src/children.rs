//! A session's children (subagents) as the web UI shows them (docs/web.md, "Children").
//!
//! Live: every event a running child writes is on its parent agent's
//! [`dsh_agent::ChildFeed`]; the server keeps what it received since the parent opened in
//! the parent's [`Feed`] (a bounded list, [`ChildEvents`]) and sends it on the parent's event
//! stream as SSE events named `child`, so a page opened mid-run sees the run whole and a slow
//! page cannot lose events to a lagging broadcast.
//!
//! Stored: `GET /api/sessions/:id/children` lists the logs under the parent's `subagents/`
//! folder and `GET /api/sessions/:id/children/:child` returns one of them. The child is found
//! by id or name among the logs [`dsh_agent::read_children`] lists there; nothing the client
//! sends becomes part of a path, and a log whose real path lies outside that folder (a planted
//! symbolic link) is neither listed nor served (docs/SECURITY.md, "Web UI and providers").

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_agent::{ChildActivity, StoredChild};
use dsh_llm::LockExt;
use dsh_protocol::{EndState, ViewProjector};
use dsh_session::{Envelope, Event, TurnEndReason};
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};

use crate::error::ApiError;
use crate::feed::{envelope_json, view_json, Feed};
use crate::sessions::{check_id, Sessions};

/// Most child events a feed keeps; past it the oldest go (the page reads them from the
/// child's log when it needs them).
const MAX_CHILD_EVENTS: usize = 50_000;

/// What the server saw of one child while it ran.
#[derive(Debug, Clone)]
pub(crate) struct LiveChild {
    /// `{id, name, label, model, depth}`.
    pub identity: Value,
    /// The parent's call that started the child (its first run's).
    pub first_call: Option<String>,
    /// A turn of the child has started and not ended.
    pub running: bool,
    /// How its last turn ended ([`EndState`]: `completed`, `cancelled`, `failed`), when one did.
    pub ended: Option<&'static str>,
}

#[derive(Debug, Default)]
struct State {
    /// Index of `items[0]` among every child event received.
    base: u64,
    /// The SSE data of each event, in arrival order.
    items: VecDeque<Arc<str>>,
    /// Children by id.
    children: BTreeMap<String, LiveChild>,
    /// The view of each child's events, by child id.
    views: BTreeMap<String, ViewProjector>,
}

/// The child events one parent's feed received (see the module docs).
#[derive(Debug)]
pub(crate) struct ChildEvents {
    state: Mutex<State>,
    /// How many events were ever received; streams wait on it.
    count: watch::Sender<u64>,
}

impl Default for ChildEvents {
    fn default() -> Self {
        ChildEvents {
            state: Mutex::new(State::default()),
            count: watch::Sender::new(0),
        }
    }
}

impl ChildEvents {
    /// Takes one event of a child.
    pub(crate) fn push(&self, activity: &ChildActivity) {
        let child = &activity.child;
        let identity = json!({
            "id": child.id, "name": child.name, "label": child.label,
            "model": child.model, "depth": child.depth,
        });
        let mut state = self.state.lock_or_recover();
        let views: Vec<String> = state
            .views
            .entry(child.id.clone())
            .or_default()
            .project(&activity.event)
            .iter()
            .map(view_json)
            .collect();
        let data = format!(
            "{{\"child\":{identity},\"callId\":{},\"background\":{},\"event\":{},\"view\":[{}]}}",
            json!(activity.call_id),
            activity.background,
            envelope_json(&activity.event),
            views.join(",")
        );
        let entry = state
            .children
            .entry(child.id.clone())
            .or_insert_with(|| LiveChild {
                identity,
                first_call: activity.call_id.clone(),
                running: false,
                ended: None,
            });
        match &activity.event.event {
            Event::TurnStart(_) => {
                entry.running = true;
                entry.ended = None;
            }
            Event::TurnEnd(end) => {
                entry.running = false;
                entry.ended = Some(EndState::of(&end.reason).as_str());
            }
            _ => {}
        }
        state.items.push_back(Arc::from(data));
        if state.items.len() > MAX_CHILD_EVENTS {
            state.items.pop_front();
            state.base += 1;
        }
        let total = state.base + state.items.len() as u64;
        self.count.send_replace(total);
    }

    /// Events from index `from` on (at most `limit`), and the index after the last one
    /// returned. A cursor before the oldest kept event moves up to it.
    pub(crate) fn since(&self, from: u64, limit: usize) -> (u64, Vec<Arc<str>>) {
        let state = self.state.lock_or_recover();
        let start = from.max(state.base);
        let skip = usize::try_from(start - state.base).unwrap_or(usize::MAX);
        let batch: Vec<Arc<str>> = state.items.iter().skip(skip).take(limit).cloned().collect();
        (start + batch.len() as u64, batch)
    }

    /// A receiver that changes whenever an event arrives.
    pub(crate) fn watch(&self) -> watch::Receiver<u64> {
        self.count.subscribe()
    }

    /// What was seen of the children that ran since the parent opened.
    pub(crate) fn live(&self) -> BTreeMap<String, LiveChild> {
        self.state.lock_or_recover().children.clone()
    }
}

/// Forwards the parent's child feed into `feed` until the feed's sender goes (the agent is
/// dropped). A lag loses events on the stream only: the page reads them from the log.
pub(crate) fn forward(mut receiver: broadcast::Receiver<ChildActivity>, feed: Arc<Feed>) {
    tokio::spawn(async move {
        use broadcast::error::RecvError;
        loop {
            match receiver.recv().await {
                Ok(activity) => feed.children().push(&activity),
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            }
        }
    });
}

/// The folder whose `subagents/` holds the children of session `id`.
async fn session_folder(sessions: &Sessions, id: &str) -> Result<PathBuf, ApiError> {
    check_id(id)?;
    if let Some(live) = sessions.live(id) {
        let anchor = dsh_session::sub_agent_anchor(&live.handle.location());
        return anchor
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| ApiError::internal("the session's log has no folder"));
    }
    let key = id.to_string();
    // A plain id (checked above): the stores look it up, never as a path.
    sessions
        .with_store(move |store| Ok(store.session_folder(&key)?))
        .await
}

/// The children stored in `folder/subagents/` whose logs really lie there.
fn confined_children(folder: &Path) -> Vec<StoredChild> {
    let Ok(root) = std::fs::canonicalize(folder.join("subagents")) else {
        return Vec::new();
    };
    dsh_agent::read_children(folder)
        .into_iter()
        .filter(|child| {
            std::fs::canonicalize(&child.log).is_ok_and(|real| {
                real.parent()
                    .and_then(Path::parent)
                    .is_some_and(|dir| dir == root)
            })
        })
        .collect()
}

/// The parent's first tool call whose result names `child` (its `childId`, else its name):
/// the `subagent` call that started it.
fn starting_call(events: &[Arc<Envelope>], child: &StoredChild) -> Option<String> {
    events.iter().find_map(|envelope| match &envelope.event {
        Event::ToolResult(result) => {
            let meta = result.meta.as_ref()?;
            let by_id = meta.get("childId").and_then(Value::as_str) == Some(child.id.as_str());
            let by_name = child.name.is_some()
                && meta.get("agent").and_then(Value::as_str) == child.name.as_deref();
            (by_id || by_name).then(|| result.call_id().map(str::to_string))?
        }
        _ => None,
    })
}

/// How a stored child's last turn ended ([`EndState`], docs/protocol.md, "Turn ends"): a turn
/// that never ended (the process stopped) and one crash repair closed are `cancelled`, a reply
/// cut at the output limit `failed`. Reads the log of a child whose turn did not complete.
fn stored_state(child: &StoredChild) -> &'static str {
    match child.state() {
        "idle" => EndState::Completed.as_str(),
        "cancelled" | "interrupted" => EndState::Cancelled.as_str(),
        _ => {
            let last_end = dsh_session::load_file(&child.log).ok().and_then(|log| {
                log.events.iter().rev().find_map(|e| match &e.event {
                    Event::TurnEnd(end) => Some(end.reason.clone()),
                    _ => None,
                })
            });
            EndState::of(&last_end.unwrap_or(TurnEndReason::Interrupted)).as_str()
        }
    }
}

fn summary(
    child: &StoredChild,
    stored: &'static str,
    live: Option<&LiveChild>,
    call: Option<String>,
    sessions: &Sessions,
) -> Value {
    // The log says `interrupted` for a turn that has not ended yet; the live view knows
    // whether it still runs.
    let state = match live {
        Some(l) if l.running => "running",
        Some(LiveChild {
            ended: Some(ended), ..
        }) => ended,
        _ => stored,
    };
    json!({
        "id": child.id,
        "name": child.name,
        "label": child.label,
        "model": child.model,
        "effort": child.effort,
        "state": state,
        "callId": call.or_else(|| live.and_then(|l| l.first_call.clone())),
        "usage": child.usage,
        "costUsd": sessions.prices.cost(&child.usage_by_model),
        "lastText": child.last_text,
    })
}

/// `GET /api/sessions/:id/children`: the session's children, oldest first, with their state
/// (`running` while the server sees a turn of theirs open), the parent's call that started
/// each, usage and cost.
pub(crate) async fn list(sessions: &Sessions, id: &str) -> Result<Value, ApiError> {
    let folder = session_folder(sessions, id).await?;
    let feed = sessions.feed(id).await?;
    let parent_events = feed.snapshot();
    let mut live = feed.children().live();
    let stored = tokio::task::spawn_blocking(move || {
        confined_children(&folder)
            .into_iter()
            .map(|child| {
                let state = stored_state(&child);
                (child, state)
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|err| ApiError::internal(format!("reading the children failed: {err}")))?;
    let mut out = Vec::new();
    for (child, state) in &stored {
        let seen = live.remove(&child.id);
        let call = starting_call(&parent_events, child);
        out.push(summary(child, state, seen.as_ref(), call, sessions));
    }
    // A child the feed announced whose log is not readable yet.
    for (_, seen) in live {
        let mut item = seen.identity.clone();
        item["state"] = json!(if seen.running {
            "running"
        } else {
            seen.ended.unwrap_or("idle")
        });
        item["callId"] = json!(seen.first_call);
        out.push(item);
    }
    Ok(json!({ "children": out }))
}

/// `GET /api/sessions/:id/children/:child`: one child (by id or name) and its log's events.
pub(crate) async fn events(sessions: &Sessions, id: &str, key: &str) -> Result<String, ApiError> {
    check_id(key)
        .map_err(|_| ApiError::bad_request(format!("`{key}` is not a child id or name")))?;
    let folder = session_folder(sessions, id).await?;
    let feed = sessions.feed(id).await?;
    let parent_events = feed.snapshot();
    let live = feed.children().live();
    let wanted = key.to_string();
    let found = tokio::task::spawn_blocking(move || {
        let child = confined_children(&folder)
            .into_iter()
            .find(|c| c.id == wanted || c.name.as_deref() == Some(wanted.as_str()))?;
        let log = dsh_session::load_file(&child.log);
        let state = stored_state(&child);
        Some((child, state, log))
    })
    .await
    .map_err(|err| ApiError::internal(format!("reading the child failed: {err}")))?;
    let Some((child, state, log)) = found else {
        return Err(ApiError::not_found(format!(
            "session {id} has no child `{key}`; GET /api/sessions/{id}/children lists them"
        )));
    };
    let log = log?;
    let call = starting_call(&parent_events, &child);
    let head = summary(&child, state, live.get(&child.id), call, sessions);
    let mut body = format!("{{\"child\":{head},\"events\":[");
    // A log written before calls carried their presentation gets it here, as the parent's
    // stream does (docs/web.md, "Tool cards").
    let mut presenter = dsh_agent::Presenter::default();
    // The view events of each event (`views[i]` of `events[i]`), as the live stream has them.
    let mut projector = ViewProjector::default();
    let mut views = String::from("],\"views\":[");
    for (index, envelope) in log.events.iter().enumerate() {
        if index > 0 {
            body.push(',');
            views.push(',');
        }
        let filled = presenter.fill(envelope);
        body.push_str(&envelope_json(filled.as_ref().unwrap_or(envelope)));
        let made: Vec<String> = projector.project(envelope).iter().map(view_json).collect();
        views.push('[');
        views.push_str(&made.join(","));
        views.push(']');
    }
    body.push_str(&views);
    body.push_str("]}");
    Ok(body)
}

type Shared = axum::extract::State<Arc<crate::routes::AppState>>;

/// Route of [`list`].
pub(crate) async fn list_route(
    axum::extract::State(state): Shared,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    Ok(axum::Json(list(&state.sessions, &id).await?).into_response())
}

/// Route of [`events`].
pub(crate) async fn events_route(
    axum::extract::State(state): Shared,
    axum::extract::Path((id, child)): axum::extract::Path<(String, String)>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let body = events(&state.sessions, &id, &child).await?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}
