//! A whole listing kept as compact rows over one text buffer (docs/PERFORMANCE.md, "Session
//! listing", fourth pass): what `dsh sessions list` prints.
//!
//! A listing of 10,000 sessions built as [`SessionSummary`]s makes about eight heap
//! allocations per session (six strings and a map of usage per model) and touches as many
//! fresh pages; here every text of every row is appended to one `String` and a row holds
//! spans into it, so reading the catalog allocates nothing per row. The `usage` column stays
//! the JSON text the catalog stores and is decoded only when a caller asks for it.

use std::collections::BTreeMap;
use std::ops::Range;

use dsh_llm::{PriceTable, UsageTotals};

use crate::listing::SessionSummary;
use crate::store::{DamagedSession, ListPage, Listing};

/// A piece of a [`Text`]: start and length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

/// The text all rows of one listing point into. Spans are `u32`: a listing whose texts pass
/// 4 GiB is refused (the caller then reads the logs; no history comes near that).
#[derive(Debug, Default)]
pub(crate) struct Text {
    buf: String,
}

/// The error of a [`Text`] that outgrew its `u32` spans.
#[derive(Debug)]
pub(crate) struct TextFull;

impl Text {
    pub(crate) fn with_capacity(bytes: usize) -> Text {
        Text {
            buf: String::with_capacity(bytes),
        }
    }

    /// Appends `s`; its span.
    pub(crate) fn push(&mut self, s: &str) -> Result<Span, TextFull> {
        let start = u32::try_from(self.buf.len()).map_err(|_| TextFull)?;
        let len = u32::try_from(s.len()).map_err(|_| TextFull)?;
        start.checked_add(len).ok_or(TextFull)?;
        self.buf.push_str(s);
        Ok(Span { start, len })
    }

    pub(crate) fn get(&self, span: Span) -> &str {
        &self.buf[range(span)]
    }
}

fn range(span: Span) -> Range<usize> {
    let start = span.start as usize;
    start..start + span.len as usize
}

/// One catalog row as a listing uses it (texts in the listing's [`Text`]).
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// `<cwd folder>/<session folder>`: the row's key.
    pub(crate) dir: Span,
    /// The log's path.
    pub(crate) location: Span,
    pub(crate) key: super::FileKey,
    pub(crate) id: Span,
    pub(crate) cwd: Span,
    pub(crate) title: Option<Span>,
    pub(crate) parent: Option<Span>,
    /// The `usage` column: per-model totals as JSON.
    pub(crate) usage: Span,
    /// The `usage` column decoded when the row was read, while its text was at hand.
    pub(crate) decoded: Decoded,
    pub(crate) created_at: u64,
    pub(crate) updated_at: u64,
    pub(crate) turns: u64,
    pub(crate) open: bool,
    /// Why the log could not be read (then the row is a placeholder).
    pub(crate) problem: Option<Span>,
}

/// A `usage` column decoded ahead of printing, when it is in the form serde writes (listing
/// decoded it at print time, after the 4 MB of rows had left the caches: 7% of a listing).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Decoded {
    /// Another form, or more than one model: decoded when asked.
    Later,
    /// No model.
    Empty,
    /// One model (its id, a span of the column's text) and its totals.
    One(Span, UsageTotals),
}

/// Decodes the `usage` column at `usage` of `text` (see [`Decoded`]).
pub(crate) fn decode(text: &Text, usage: Span) -> Decoded {
    let column = text.get(usage);
    let mut one = None;
    let mut models = 0;
    let written = super::visit_usage_as_written(column, |model, totals| {
        models += 1;
        // The model's offset in the column: `model` is a slice of it.
        let offset = model.as_ptr() as usize - column.as_ptr() as usize;
        one = Some((offset, model.len(), totals));
        models == 1
    });
    match (written, one) {
        (true, None) => Decoded::Empty,
        (true, Some((offset, len, totals))) => Decoded::One(
            Span {
                // Within `usage`, whose end fits in u32.
                start: usage.start + offset as u32,
                len: len as u32,
            },
            totals,
        ),
        (false, _) => Decoded::Later,
    }
}

/// Every readable session of a listing, most recently updated first (ties by id), and a
/// message for each session whose log could not be read. See the module docs.
#[derive(Debug, Default)]
pub struct ListedSessions {
    text: Text,
    rows: Vec<Row>,
    /// Indices into `rows` of the readable sessions, in listing order.
    order: Vec<u32>,
    /// One message per unreadable session (what and where), by path.
    pub problems: Vec<String>,
    /// The unreadable sessions, by path.
    pub damaged: Vec<DamagedSession>,
}

/// One session of a [`ListedSessions`], borrowed.
#[derive(Clone, Copy)]
pub struct ListedSession<'a> {
    text: &'a Text,
    row: &'a Row,
}

impl ListedSessions {
    /// Orders `rows` (over `text`) as a listing: readable sessions most recently updated first,
    /// ties by id (as the `entries_by_time` index orders them); damaged ones by path.
    pub(crate) fn of_rows(text: Text, rows: Vec<Row>) -> ListedSessions {
        let mut damaged = Vec::new();
        let mut order: Vec<(u64, u32)> = Vec::with_capacity(rows.len());
        for (i, row) in rows.iter().enumerate() {
            match row.problem {
                None => order.push((row.updated_at, i as u32)),
                Some(problem) => damaged.push(DamagedSession {
                    path: text.get(row.location).to_string(),
                    updated_at: row.updated_at,
                    problem: text.get(problem).to_string(),
                }),
            }
        }
        let id = |i: u32| text.get(rows[i as usize].id);
        order.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| id(a.1).cmp(id(b.1))));
        // The rows stay where they are; the listing goes through `order` (moving 10,000 rows
        // into a new vector was a copy of megabytes into fresh pages).
        let order = order.into_iter().map(|(_, i)| i).collect();
        damaged.sort_by(|a, b| a.path.cmp(&b.path));
        let problems = damaged.iter().map(|d| d.problem.clone()).collect();
        ListedSessions {
            text,
            rows,
            order,
            problems,
            damaged,
        }
    }

    /// The same sessions as `listing` (already in listing order), for a store without a
    /// catalog.
    pub fn from_listing(listing: Listing) -> ListedSessions {
        let mut text = Text::default();
        let mut rows = Vec::with_capacity(listing.sessions.len());
        for s in &listing.sessions {
            // Only a listing of more than 4 GiB of text fails here; it is then cut short
            // rather than refused (a store without a catalog has no faster way to list).
            let Ok(row) = row_of_summary(&mut text, s) else {
                break;
            };
            rows.push(row);
        }
        ListedSessions {
            text,
            order: (0..rows.len() as u32).collect(),
            rows,
            problems: listing.problems,
            damaged: listing.damaged,
        }
    }

    /// Number of readable sessions.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when no session could be read.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The readable sessions, most recently updated first.
    pub fn iter(&self) -> impl Iterator<Item = ListedSession<'_>> + '_ {
        self.order.iter().map(|&i| ListedSession {
            text: &self.text,
            row: &self.rows[i as usize],
        })
    }

    /// Cuts the listing to `page` as [`Listing::into_page`] cuts a whole [`Listing`], building
    /// summaries only for the sessions of the page.
    pub(crate) fn into_page(self, page: &ListPage) -> crate::error::Result<Listing> {
        let after = match page.after.as_deref() {
            Some(cursor) => Some(crate::store::parse_cursor(cursor)?),
            None => None,
        };
        let limit = page.limit.unwrap_or(usize::MAX);
        let sessions: Vec<SessionSummary> = self
            .iter()
            .filter(|s| match &after {
                Some((time, id)) => {
                    s.updated_at() < *time || (s.updated_at() == *time && s.id() > id.as_str())
                }
                None => true,
            })
            .take(limit)
            .map(|s| s.summary())
            .collect();
        let next = if page.limit.is_some_and(|l| sessions.len() == l) {
            sessions
                .last()
                .map(|s| format!("{}:{}", s.updated_at, s.id))
        } else {
            None
        };
        let (problems, damaged) = if after.is_some() {
            (Vec::new(), Vec::new())
        } else {
            (self.problems, self.damaged)
        };
        Ok(Listing {
            sessions,
            problems,
            damaged,
            next,
        })
    }
}

/// The row of a summary, its texts appended to `text`; the usage as the catalog stores it.
pub(crate) fn row_of_summary(text: &mut Text, s: &SessionSummary) -> Result<Row, TextFull> {
    let usage = serde_json::to_string(&s.usage_by_model).unwrap_or_else(|_| "{}".into());
    let usage = text.push(&usage)?;
    Ok(Row {
        // Set by a caller that has one (a row of the catalog).
        dir: Span { start: 0, len: 0 },
        location: text.push(&s.location)?,
        key: super::FileKey::default(),
        id: text.push(&s.id)?,
        cwd: text.push(&s.cwd)?,
        title: s.title.as_deref().map(|t| text.push(t)).transpose()?,
        parent: s
            .parent_session
            .as_deref()
            .map(|t| text.push(t))
            .transpose()?,
        usage,
        decoded: decode(text, usage),
        created_at: s.created_at,
        updated_at: s.updated_at,
        turns: s.turns,
        open: s.open,
        problem: None,
    })
}

impl<'a> ListedSession<'a> {
    /// The session id.
    pub fn id(&self) -> &'a str {
        self.text.get(self.row.id)
    }

    /// The latest title, if any.
    pub fn title(&self) -> Option<&'a str> {
        self.row.title.map(|t| self.text.get(t))
    }

    /// The working directory.
    pub fn cwd(&self) -> &'a str {
        self.text.get(self.row.cwd)
    }

    /// The log's path.
    pub fn location(&self) -> &'a str {
        self.text.get(self.row.location)
    }

    /// The session this one was forked from.
    pub fn parent_session(&self) -> Option<&'a str> {
        self.row.parent.map(|t| self.text.get(t))
    }

    /// Number of turns started.
    pub fn turns(&self) -> u64 {
        self.row.turns
    }

    /// Creation time, ms since the epoch.
    pub fn created_at(&self) -> u64 {
        self.row.created_at
    }

    /// Last update, ms since the epoch.
    pub fn updated_at(&self) -> u64 {
        self.row.updated_at
    }

    /// True when a turn or tool call is still open.
    pub fn open(&self) -> bool {
        self.row.open
    }

    /// Usage per model (decoded from the stored text).
    pub fn usage_by_model(&self) -> BTreeMap<String, UsageTotals> {
        super::parse_usage(self.text.get(self.row.usage))
    }

    /// Usage summed over models and the cost of it at `prices` (`None` when some model with
    /// usage has no price): the same figures as [`SessionSummary::usage`] and
    /// [`SessionSummary::cost`] of [`ListedSession::summary`], without building its map.
    pub fn usage_and_cost(&self, prices: &PriceTable) -> (UsageTotals, Option<f64>) {
        match self.row.decoded {
            Decoded::Empty => return (UsageTotals::default(), Some(0.0)),
            Decoded::One(model, totals) => {
                // As `PriceTable::cost` sums: from 0.0.
                let cost = prices
                    .models
                    .get(self.text.get(model))
                    .map(|p| 0.0 + p.cost(&totals.usage));
                return (totals, cost);
            }
            Decoded::Later => {}
        }
        let text = self.text.get(self.row.usage);
        let mut total = UsageTotals::default();
        let mut cost = Some(0.0);
        // The summary's map iterates models in key order; serde writes them in that order, so
        // when the text's models are strictly increasing, text order is map order and the
        // floating-point sum is the same. Anything else goes through the map.
        let mut last: Option<&str> = None;
        let as_written = super::visit_usage_as_written(text, |model, totals| {
            if last.is_some_and(|l| l >= model) {
                return false;
            }
            last = Some(model);
            total.merge(&totals);
            cost = cost.and_then(|c| Some(c + prices.models.get(model)?.cost(&totals.usage)));
            true
        });
        if as_written {
            return (total, cost);
        }
        let map = self.usage_by_model();
        let mut total = UsageTotals::default();
        for t in map.values() {
            total.merge(t);
        }
        (total, prices.cost(&map))
    }

    /// The session as a [`SessionSummary`].
    pub fn summary(&self) -> SessionSummary {
        SessionSummary {
            id: self.id().to_string(),
            title: self.title().map(str::to_string),
            cwd: self.cwd().to_string(),
            turns: self.turns(),
            usage_by_model: self.usage_by_model(),
            created_at: self.created_at(),
            updated_at: self.updated_at(),
            parent_session: self.parent_session().map(str::to_string),
            location: self.location().to_string(),
            open: self.open(),
        }
    }
}
