//! The sessions the server knows: live ones (a [`dsh_agent::Agent`] running `serve` in a task) and
//! stored ones (read from the log, read-only until a prompt reopens them with resume).
//!
//! Lifecycle changes (open, close, the rename of a stored session) are serialised by one async
//! lock; operations on a live agent (queue, steer, cancel, set the call or the permission
//! preset, rename) go straight to its [`AgentHandle`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use dsh_agent::AgentHandle;
use dsh_llm::{CallConfig, LockExt};
use dsh_protocol::{Interactions, ModelLookup, Op, SessionControl};
use dsh_runtime::{Choices, Resume, SessionFactory, SessionSpec};
use dsh_session::{open_store, Envelope, Event, PriceTable, SessionStore, SessionTitle, StoreKind};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::feed::Feed;

/// What the server asks its front end to build: an agent for a session in `cwd`.
#[derive(Debug, Clone, Default)]
pub struct OpenRequest {
    /// The session's working directory.
    pub cwd: PathBuf,
    /// Resume this session id instead of creating a new session.
    pub resume: Option<String>,
    /// Model to use instead of the configured default.
    pub model: Option<String>,
    /// Reasoning effort to use instead of the configured default (`off`, `low`, ...).
    pub effort: Option<String>,
}

impl OpenRequest {
    /// The spec the web UI asks the composition root for: the session's workspace, model and
    /// effort over `dsh web`'s flags, and a model-written title (the UI lists sessions by
    /// title).
    pub fn spec(&self) -> SessionSpec {
        SessionSpec {
            cwd: Some(self.cwd.clone()),
            resume: self
                .resume
                .as_ref()
                .map_or(Resume::New, |id| Resume::Id(id.clone())),
            choices: Choices {
                model: self.model.clone(),
                effort: self.effort.clone(),
                ..Choices::default()
            },
            model_titles: true,
            history: false,
            ..SessionSpec::default()
        }
    }
}

/// A session with a running agent.
pub struct LiveSession {
    /// Drives the agent.
    pub handle: AgentHandle,
    /// Carries out the API's operations on the session (docs/protocol.md): its
    /// [`dsh_protocol::Interactions`] is the agent's approver and asker.
    pub control: SessionControl,
    /// The session's working directory.
    pub cwd: PathBuf,
    /// Opens the provider connection again when the user starts a message (docs/web.md,
    /// "Connection warm-up").
    pub preconnect: dsh_runtime::Preconnector,
    stop: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl LiveSession {
    /// The current call config.
    pub fn call(&self) -> CallConfig {
        self.control.call()
    }

    /// Carries out `op` (docs/protocol.md, "Operations"), refusals as API errors.
    pub fn submit(&self, op: Op) -> Result<Vec<String>, ApiError> {
        self.control.submit(op).map_err(ApiError::from)
    }
}

/// Where the server keeps sessions, and which are live.
pub struct Sessions {
    home: PathBuf,
    store_kind: StoreKind,
    factory: Arc<dyn SessionFactory>,
    /// Prices for listing costs.
    pub prices: PriceTable,
    live: Mutex<HashMap<String, Arc<LiveSession>>>,
    feeds: Mutex<HashMap<String, Arc<Feed>>>,
    lifecycle: tokio::sync::Mutex<()>,
    /// The catalog `GET /api/sessions` lists through, kept in line with the logs by watches
    /// (docs/sessions.md, "Watched listing"); used for the JSONL store only.
    listing: Arc<Mutex<dsh_session::WatchedCatalog>>,
    /// Cancelled when the server stops: ends SSE streams.
    pub shutdown: CancellationToken,
    this: Weak<Sessions>,
}

/// The preset of the last `permission/preset` event in `events`.
fn last_preset(events: &[Envelope]) -> Option<String> {
    events
        .iter()
        .rev()
        .find_map(|envelope| match &envelope.event {
            Event::Opaque { event_type, data }
                if event_type == dsh_agent::PERMISSION_PRESET_EVENT =>
            {
                data.get("preset")?.as_str().map(str::to_string)
            }
            _ => None,
        })
}

/// Refuses ids that are not plain session ids (the stores also accept paths; the API must not).
pub(crate) fn check_id(id: &str) -> Result<(), ApiError> {
    let plain = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!("`{id}` is not a session id")))
    }
}

impl Sessions {
    /// A registry over the store of kind `store_kind` in `home`.
    pub fn new(
        home: PathBuf,
        store_kind: StoreKind,
        factory: Arc<dyn SessionFactory>,
        prices: PriceTable,
    ) -> Arc<Sessions> {
        Arc::new_cyclic(|this| Sessions {
            listing: Arc::new(Mutex::new(dsh_session::WatchedCatalog::new(&home))),
            home,
            store_kind,
            factory,
            prices,
            live: Mutex::new(HashMap::new()),
            feeds: Mutex::new(HashMap::new()),
            lifecycle: tokio::sync::Mutex::new(()),
            shutdown: CancellationToken::new(),
            this: this.clone(),
        })
    }

    /// Model ids the factory offers.
    pub fn models(&self) -> Vec<String> {
        self.factory.models()
    }

    /// What the factory's provider says about `model` (efforts it takes, default effort).
    pub fn model_info(&self, model: &str) -> Option<dsh_llm::ModelInfo> {
        self.factory.model_info(model)
    }

    /// The model a session opened for `request` would use (see
    /// [`SessionFactory::default_model`]).
    pub fn default_model(&self, request: &OpenRequest) -> Option<String> {
        self.factory.default_model(&request.spec())
    }

    /// The dsh home.
    pub fn home(&self) -> &std::path::Path {
        &self.home
    }

    /// After the user trusted `workspace`: the factory forgets what it resolved there, so new
    /// sessions (and reopened ones) apply the workspace's settings.
    pub fn trusted(&self, workspace: &std::path::Path) {
        self.factory.trusted(workspace);
    }

    /// Stops the live agent of session `id` and opens it again from its log, so it is built
    /// with the configuration as it is now. Refused while a turn runs.
    pub async fn reopen(&self, id: &str) -> Result<(), ApiError> {
        check_id(id)?;
        {
            let _lifecycle = self.lifecycle.lock().await;
            if self.running(id) {
                return Err(ApiError::conflict(
                    "BUSY",
                    "the session is running a turn; reopen it when the turn ends",
                ));
            }
            self.close(id).await;
        }
        self.ensure_live(id).await.map(|_| ())
    }

    /// One page of the stored sessions, most recently updated first: for the JSONL store
    /// through the watched catalog this server keeps (a listing reads the events of the
    /// session folders instead of walking them all), else from the store.
    pub async fn list_page(
        &self,
        page: dsh_session::ListPage,
    ) -> Result<dsh_session::Listing, ApiError> {
        let all = dsh_session::ListFilter::default();
        if self.store_kind != StoreKind::Jsonl {
            return self
                .with_store(move |store| Ok(store.list_page(&all, &page)?))
                .await;
        }
        let listing = Arc::clone(&self.listing);
        tokio::task::spawn_blocking(move || Ok(listing.lock_or_recover().list_page(&all, &page)?))
            .await
            .map_err(|err| ApiError::internal(format!("a listing task failed: {err}")))?
    }

    /// Runs `f` with the store on a blocking thread.
    pub async fn with_store<T, F>(&self, f: F) -> Result<T, ApiError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn SessionStore) -> Result<T, ApiError> + Send + 'static,
    {
        let home = self.home.clone();
        let kind = self.store_kind;
        tokio::task::spawn_blocking(move || {
            let store = open_store(kind, &home)?;
            f(store.as_ref())
        })
        .await
        .map_err(|err| ApiError::internal(format!("a store task failed: {err}")))?
    }

    /// The live session `id`, if open.
    pub fn live(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.live.lock_or_recover().get(id).cloned()
    }

    /// Ids of the live sessions.
    pub fn live_ids(&self) -> Vec<String> {
        self.live.lock_or_recover().keys().cloned().collect()
    }

    /// True when the session `id` is live and a turn is open.
    pub fn running(&self, id: &str) -> bool {
        self.live(id).is_some()
            && self
                .feeds
                .lock_or_recover()
                .get(id)
                .is_some_and(|feed| feed.running())
    }

    /// The feed of `id`: the live one, or one refreshed from the log.
    pub async fn feed(&self, id: &str) -> Result<Arc<Feed>, ApiError> {
        check_id(id)?;
        let existing = self.feeds.lock_or_recover().get(id).cloned();
        if let Some(feed) = &existing {
            if self.live(id).is_some() {
                return Ok(Arc::clone(feed));
            }
        }
        let key = id.to_string();
        let loaded = self.with_store(move |store| Ok(store.load(&key)?)).await?;
        let feed = existing.unwrap_or_else(|| Arc::new(Feed::new(self.prices.clone())));
        feed.extend_from_log(loaded.events);
        let mut feeds = self.feeds.lock_or_recover();
        let entry = feeds.entry(loaded.header.id.clone()).or_insert(feed);
        Ok(Arc::clone(entry))
    }

    /// The feed of `id`, created empty when the server has none.
    fn feed_entry(&self, id: &str) -> Arc<Feed> {
        let mut feeds = self.feeds.lock_or_recover();
        let feed = feeds
            .entry(id.to_string())
            .or_insert_with(|| Arc::new(Feed::new(self.prices.clone())));
        Arc::clone(feed)
    }

    /// Creates a session in `request.cwd` and starts its agent. Returns its id.
    pub async fn create(&self, request: OpenRequest) -> Result<String, ApiError> {
        let _lifecycle = self.lifecycle.lock().await;
        self.open(request).await
    }

    /// The live session `id`, reopening it from the log (resume) when it is not live.
    pub async fn ensure_live(&self, id: &str) -> Result<Arc<LiveSession>, ApiError> {
        check_id(id)?;
        if let Some(live) = self.live(id) {
            return Ok(live);
        }
        let _lifecycle = self.lifecycle.lock().await;
        if let Some(live) = self.live(id) {
            return Ok(live);
        }
        let key = id.to_string();
        let header = self
            .with_store(move |store| Ok(store.load(&key)?.header))
            .await?;
        let request = OpenRequest {
            cwd: PathBuf::from(&header.cwd),
            resume: Some(header.id.clone()),
            ..OpenRequest::default()
        };
        let id = self.open(request).await?;
        self.live(&id)
            .ok_or_else(|| ApiError::internal("the session closed right after opening"))
    }

    /// Builds and starts an agent; the caller holds the lifecycle lock.
    async fn open(&self, request: OpenRequest) -> Result<String, ApiError> {
        let factory = Arc::clone(&self.factory);
        // The session's one approval and question broker: questions wait for the API's
        // answers (docs/protocol.md, "Approvals and questions").
        let interactions = Interactions::interactive();
        let opened = {
            let interactions = interactions.clone();
            self.with_store(move |store| {
                let mut opened = factory.open(&request.spec(), store)?;
                opened.agent.set_approver(Arc::new(interactions.clone()));
                opened.agent.set_asker(Arc::new(interactions));
                // Everything the agent wrote while opening (resume closers) is durable before
                // the feed reads the log below.
                let loaded = store.load(&opened.agent.handle().session_id())?;
                Ok((opened, loaded.events, request.cwd))
            })
            .await?
        };
        let (opened, events, cwd) = opened;
        // Taken before the agent serves, so no child event is missed (docs/web.md, "Children").
        let children = opened.children.subscribe();
        let preconnect = opened.preconnect;
        let mut agent = opened.agent;
        let handle = agent.handle();
        let id = handle.session_id();
        // Subscribe before anything else can append: nothing runs until `serve` starts.
        let mut receiver = handle.subscribe();
        let logged_preset = last_preset(&events);
        let feed = self.feed_entry(&id);
        feed.set_tools(&handle.tools());
        feed.extend_from_log(events);
        crate::children::forward(children, Arc::clone(&feed));

        let forwarder_feed = Arc::clone(&feed);
        let this = self.this.clone();
        let forward_id = id.clone();
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match receiver.recv().await {
                    Ok(envelope) => {
                        let flush_point = dsh_session::is_flush_point(&envelope.event);
                        if !forwarder_feed.push_live(envelope) && flush_point {
                            if let Some(sessions) = this.upgrade() {
                                sessions.resync(&forward_id, &forwarder_feed).await;
                            }
                        }
                    }
                    // The next event will not follow the feed's end, which starts a resync.
                    Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => break,
                }
            }
        });

        // The preset in force, logged now unless the log says so already (a new session, or a
        // resume under another `--permission`), so the UI shows it from the events at once
        // rather than from the first step on. The safety policy sees this event and does not
        // log the preset again.
        let preset = handle.permission().as_str();
        if logged_preset.as_deref() != Some(preset) {
            handle.log_event(Event::Opaque {
                event_type: dsh_agent::PERMISSION_PRESET_EVENT.to_string(),
                data: serde_json::json!({"preset": preset}),
            })?;
        }

        let stop = CancellationToken::new();
        let factory = Arc::clone(&self.factory);
        let models: ModelLookup = Arc::new(move |model: &str| factory.model_info(model));
        let control = SessionControl::new(
            handle.clone(),
            interactions,
            agent.call().clone(),
            models,
            cwd.clone(),
        );
        let live = Arc::new(LiveSession {
            handle,
            control,
            cwd,
            preconnect,
            stop: stop.clone(),
            task: Mutex::new(None),
        });
        let this = self.this.clone();
        let task_id = id.clone();
        let task_live = Arc::downgrade(&live);
        let task = tokio::spawn(async move {
            if let Err(err) = agent.serve(stop).await {
                eprintln!("dsh web: session {task_id} stopped: {err}");
            }
            drop(agent);
            // Forget this agent (not a newer one for the same id) so a prompt reopens it.
            if let (Some(sessions), Some(live)) = (this.upgrade(), task_live.upgrade()) {
                let mut map = sessions.live.lock_or_recover();
                if map.get(&task_id).is_some_and(|l| Arc::ptr_eq(l, &live)) {
                    map.remove(&task_id);
                }
            }
        });
        *live.task.lock_or_recover() = Some(task);
        self.live.lock_or_recover().insert(id.clone(), live);
        Ok(id)
    }

    /// Re-reads the log into `feed` after the forwarder lagged.
    async fn resync(&self, id: &str, feed: &Feed) {
        let key = id.to_string();
        match self.with_store(move |store| Ok(store.load(&key)?)).await {
            Ok(loaded) => feed.extend_from_log(loaded.events),
            Err(err) => eprintln!("dsh web: cannot re-read session {id}: {err}"),
        }
    }

    /// Stops the agent of `id` (after its running turn, if any) and releases the session's
    /// writer.
    async fn close(&self, id: &str) {
        let Some(live) = self.live.lock_or_recover().remove(id) else {
            return;
        };
        // What waits for an answer is refused: nobody can answer it once the agent goes.
        live.control
            .interactions()
            .close("the web UI closed this session before the user answered");
        live.stop.cancel();
        let task = live.task.lock_or_recover().take();
        if let Some(task) = task {
            // A panicked serve task has dropped its agent already; nothing more to release.
            let _ = task.await;
        }
        // The handle shares the agent's log (and so its writer lock): dropping `live` lets it go.
    }

    /// Renames session `id` with a `session/title` event from the user. A live agent holds the
    /// session's writer, so it logs the event itself (at once, even while a turn runs); a
    /// stored session gets it through a short-lived writer.
    /// A rename during the first turn also wins over the title the model writes for the
    /// session when that turn ends (the agent keeps a title set meanwhile).
    pub async fn rename(&self, id: &str, title: SessionTitle) -> Result<(), ApiError> {
        check_id(id)?;
        // No session opens or closes meanwhile: a stored session stays stored.
        let _lifecycle = self.lifecycle.lock().await;
        if let Some(live) = self.live(id) {
            live.handle.log_event(Event::SessionTitle(title))?;
            return Ok(());
        }
        let key = id.to_string();
        self.with_store(move |store| {
            // A stopping agent may still hold the writer for a moment.
            let mut attempts = 0;
            let resumed = loop {
                match store.resume(&key) {
                    Err(dsh_session::SessionError::Locked { .. }) if attempts < 20 => {
                        attempts += 1;
                        std::thread::sleep(std::time::Duration::from_millis(25));
                    }
                    other => break other?,
                }
            };
            let mut writer = resumed.writer;
            writer.append(Event::SessionTitle(title))?;
            writer.flush()?;
            Ok(())
        })
        .await?;
        self.feed(id).await?;
        Ok(())
    }

    /// Cancels every running turn and stops every agent; ends SSE streams.
    pub async fn shutdown(&self) {
        self.shutdown.cancel();
        let ids = self.live_ids();
        for id in &ids {
            if let Some(live) = self.live(id) {
                live.handle.cancel(true);
            }
        }
        for id in ids {
            self.close(&id).await;
        }
    }

    /// Events of a stored or live session as the log holds them (for export).
    pub async fn load(&self, id: &str) -> Result<dsh_session::LoadedLog, ApiError> {
        check_id(id)?;
        let key = id.to_string();
        self.with_store(move |store| Ok(store.load(&key)?)).await
    }

    /// The feed's events of `id` (live sessions include unflushed events).
    pub async fn events(&self, id: &str) -> Result<Vec<Arc<Envelope>>, ApiError> {
        Ok(self.feed(id).await?.snapshot())
    }
}
