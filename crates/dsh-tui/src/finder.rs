//! The `@` file finder (docs/tui.md, "File mentions"): typing `@` in the composer opens a popup
//! of workspace files matching what follows it, best first. The workspace is listed on a
//! thread of its own (the `ignore` crate's walk: `.gitignore`, `.ignore` and hidden-file rules,
//! as `glob` and `grep` do), which fills a shared list as it reads, up to [`MAX_FILES`] entries;
//! the popup shows what has been read so far. The walk lists what the file gate lets dsh's
//! tools list (docs/SECURITY.md, "The file gate"): nothing it denies, and, as root, nothing
//! inside another user's folder that its mode keeps private (such a folder is not entered).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crossterm::event::{KeyCode, KeyEvent};
use dsh_llm::LockExt;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use crate::app::{Action, App};

/// Most workspace entries listed (files and folders).
pub const MAX_FILES: usize = 50_000;
/// Most matches shown in the popup.
pub const MAX_SHOWN: usize = 8;

/// The workspace's paths, relative to the working directory (folders end with `/`), filled by
/// a walk on its own thread that starts on first use.
#[derive(Clone, Default)]
pub struct FileIndex {
    root: Option<PathBuf>,
    entries: Arc<Mutex<Vec<String>>>,
    started: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
}

impl FileIndex {
    /// An index of `root` (nothing is read until [`FileIndex::start`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FileIndex {
            root: Some(root.into()),
            ..FileIndex::default()
        }
    }

    /// The folder listed.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Starts the walk (once).
    pub fn start(&self) {
        let Some(root) = self.root.clone() else {
            return;
        };
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let entries = Arc::clone(&self.entries);
        let done = Arc::clone(&self.done);
        std::thread::spawn(move || {
            walk(&root, &entries);
            done.store(true, Ordering::SeqCst);
        });
    }

    /// True once the walk has finished.
    pub fn done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// How many entries have been read.
    pub fn len(&self) -> usize {
        self.entries.lock_or_recover().len()
    }

    /// True while nothing has been read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The best [`MAX_SHOWN`] entries for `query` (see [`score`]).
    pub fn search(&self, query: &str) -> Vec<String> {
        let entries = self.entries.lock_or_recover();
        let mut scored: Vec<(i64, &String)> = entries
            .iter()
            .filter_map(|entry| score(query, entry).map(|s| (s, entry)))
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        scored
            .into_iter()
            .take(MAX_SHOWN)
            .map(|(_, entry)| entry.clone())
            .collect()
    }
}

/// Lists `root` into `entries` in batches, so a reader sees the list grow.
fn walk(root: &Path, entries: &Mutex<Vec<String>>) {
    let mut batch = Vec::with_capacity(256);
    let mut total = 0;
    let Ok(real_root) = std::fs::canonicalize(root) else {
        return;
    };
    let gate = dsh_tools::GatePolicy::new(&real_root);
    if gate.check_workspace_dir(&real_root).is_err() {
        return;
    }
    // A repository's ignore file that is a FIFO or a link to `/dev/zero` would hang the walk
    // or fill memory: such folders are not entered, and a root with one is not walked
    // (docs/SECURITY.md, "The file gate").
    if root
        .ancestors()
        .any(|dir| dsh_tools::unsafe_ignore_file(dir).is_some())
    {
        return;
    }
    let walker = ignore::WalkBuilder::new(&real_root)
        .hidden(true)
        .git_ignore(true)
        .git_global(true)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| {
            !(entry.file_type().is_some_and(|t| t.is_dir())
                && dsh_tools::unsafe_ignore_file(entry.path()).is_some())
                && entry
                    .metadata()
                    .is_ok_and(|meta| gate.may_list(entry.path(), &meta))
        })
        .build();
    for entry in walker.flatten() {
        let Ok(relative) = entry.path().strip_prefix(&real_root) else {
            continue;
        };
        if relative.as_os_str().is_empty() {
            continue;
        }
        let mut text = relative.to_string_lossy().into_owned();
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            text.push('/');
        }
        batch.push(text);
        total += 1;
        if batch.len() == batch.capacity() {
            entries.lock_or_recover().append(&mut batch);
        }
        if total >= MAX_FILES {
            break;
        }
    }
    entries.lock_or_recover().append(&mut batch);
}

/// How well `path` matches `query` (case-insensitive, the query's characters in order), or
/// `None`. Higher is better: characters that follow each other, a match in the file name, a
/// match at the start of a path component, and shorter paths score higher.
pub fn score(query: &str, path: &str) -> Option<i64> {
    if query.is_empty() {
        return Some(-(path.len() as i64));
    }
    let lower: Vec<char> = path.to_lowercase().chars().collect();
    let name_start = path
        .trim_end_matches('/')
        .rfind('/')
        .map_or(0, |i| path[..=i].chars().count());
    let mut at = 0;
    let mut total: i64 = 0;
    let mut previous: Option<usize> = None;
    for q in query.to_lowercase().chars() {
        let found = (at..lower.len()).find(|&i| lower[i] == q)?;
        total += 1;
        if previous.is_some_and(|p| p + 1 == found) {
            total += 5;
        }
        if found == 0 || matches!(lower[found - 1], '/' | '_' | '-' | '.') {
            total += 3;
        }
        if found >= name_start {
            total += 2;
        }
        previous = Some(found);
        at = found + 1;
    }
    Some(total * 100 - lower.len() as i64)
}

/// The popup's state.
#[derive(Clone, Default)]
pub struct Finder {
    /// The workspace listing.
    pub index: FileIndex,
    /// The matches shown, best first.
    pub matches: Vec<String>,
    /// The highlighted match.
    pub selected: usize,
    /// The query the matches are for, and how many entries were listed then.
    searched: Option<(String, usize)>,
    /// Esc closed the popup for this query.
    closed_for: Option<String>,
}

impl Finder {
    /// A finder over the files below `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Finder {
            index: FileIndex::new(root),
            ..Finder::default()
        }
    }

    /// True while an `@` query is open: the UI then redraws on its 100 ms tick, and each redraw
    /// searches again if the listing grew ([`Finder::refresh`]). The walk's entries and its end
    /// send no event, so without the tick a walk that ends while the screen is drawn could
    /// leave the popup closed until the next key. Ticking only while the walk ran or the
    /// listing had grown since the last search still missed (5 of 80 runs of dsh-cli's
    /// `at_mention_from_the_finder_attaches_the_file` with both cores busy; 0 of 160 with
    /// this), for a reason not found. The tick costs a diffed redraw every 100 ms while the
    /// user writes a mention, nothing otherwise.
    pub fn keeps_redrawing(&self) -> bool {
        self.searched.is_some()
    }

    /// Rows the popup takes (its matches and a border), 0 while it is closed.
    pub fn popup_rows(&self) -> u16 {
        if self.matches.is_empty() {
            0
        } else {
            self.matches.len() as u16 + 2
        }
    }

    /// The `@` query being typed in the composer, if the popup applies.
    fn query(app: &App) -> Option<String> {
        let word = app.composer.word_before_cursor()?;
        let query = word.strip_prefix('@')?.to_string();
        if app.finder.closed_for.as_deref() == Some(query.as_str()) {
            return None;
        }
        Some(query)
    }

    /// Brings the matches up to date with the draft and the listing; true while the popup is
    /// open (an `@` word is at the cursor and something matches).
    pub fn refresh(app: &mut App) -> bool {
        let Some(query) = Finder::query(app) else {
            app.finder.matches.clear();
            app.finder.searched = None;
            return false;
        };
        app.finder.closed_for = None;
        app.finder.index.start();
        let listed = app.finder.index.len();
        let key = (query.clone(), listed);
        if app.finder.searched.as_ref() != Some(&key) {
            if app.finder.searched.as_ref().map(|s| &s.0) != Some(&query) {
                app.finder.selected = 0;
            }
            app.finder.matches = app.finder.index.search(&query);
            app.finder.searched = Some(key);
        }
        app.finder.selected = app
            .finder
            .selected
            .min(app.finder.matches.len().saturating_sub(1));
        !app.finder.matches.is_empty()
    }

    /// The popup's keys: Up/Down choose, Tab or Enter insert `@path`, Esc closes. `None` when
    /// the popup is closed or the key is not one of them.
    pub fn on_key(app: &mut App, key: &KeyEvent) -> Option<Vec<Action>> {
        if !matches!(
            key.code,
            KeyCode::Up | KeyCode::Down | KeyCode::Tab | KeyCode::Enter | KeyCode::Esc
        ) || !key.modifiers.is_empty()
        {
            return None;
        }
        if !Finder::refresh(app) {
            return None;
        }
        let count = app.finder.matches.len();
        match key.code {
            KeyCode::Up => app.finder.selected = (app.finder.selected + count - 1) % count,
            KeyCode::Down => app.finder.selected = (app.finder.selected + 1) % count,
            KeyCode::Esc => app.finder.closed_for = Finder::query(app),
            _ => {
                let chosen = app.finder.matches[app.finder.selected].clone();
                // A folder keeps the popup open to go deeper; a file ends the mention.
                let text = if chosen.ends_with('/') {
                    format!("@{chosen}")
                } else {
                    format!("@{chosen} ")
                };
                app.composer.replace_word_before_cursor(&text);
                Finder::refresh(app);
            }
        }
        Some(Vec::new())
    }
}

/// Draws the popup in the bottom rows of `room` (the rows right above the composer).
pub fn draw_finder(frame: &mut Frame<'_>, app: &mut App, room: Rect) {
    if !Finder::refresh(app) {
        return;
    }
    let finder = &app.finder;
    let height = finder.popup_rows().min(room.height);
    if height < 3 {
        return;
    }
    let area = Rect::new(room.x, room.y + room.height - height, room.width, height);
    let lines: Vec<Line<'static>> = finder
        .matches
        .iter()
        .enumerate()
        .map(|(i, path)| {
            let style = if i == finder.selected {
                Style::default().bg(Color::DarkGray).fg(Color::White)
            } else {
                Style::default()
            };
            Line::from(Span::styled(format!("@{path}"), style))
        })
        .collect();
    let listing = if finder.index.done() {
        String::new()
    } else {
        format!(" · listing… {}", finder.index.len())
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(Style::default().fg(Color::DarkGray))
        .title(Span::styled(
            format!(" files · Tab/Enter insert · Esc closes{listing} "),
            Style::default().add_modifier(Modifier::DIM),
        ));
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_query_keeps_the_screen_redrawing_until_it_closes() {
        let mut app = App::new(crate::StatusInfo::default());
        app.finder = Finder::new("/nonexistent");
        assert!(!app.finder.keeps_redrawing(), "no query, no ticks");
        app.composer.insert_str("explain @pars");
        Finder::refresh(&mut app);
        assert!(app.finder.keeps_redrawing(), "an @ word at the cursor");
        // The walk appends an entry and ends after that search: the next tick's refresh
        // finds it.
        app.finder
            .index
            .entries
            .lock_or_recover()
            .push("src/parser.rs".into());
        app.finder.index.done.store(true, Ordering::SeqCst);
        assert!(Finder::refresh(&mut app), "the popup opens on the tick");
        assert_eq!(app.finder.matches, ["src/parser.rs"]);
        app.composer.insert_str(" ");
        Finder::refresh(&mut app);
        assert!(!app.finder.keeps_redrawing(), "the mention is done");
    }
}
