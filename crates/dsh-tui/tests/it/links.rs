//! Terminal hyperlinks in the full-screen mode (docs/tui.md, "Links"): frames drawn through
//! ratatui's crossterm backend and the link overlay (`dsh_tui::links`) are fed to a small
//! terminal model that keeps, per cell, the text and the OSC 8 address it was written with.
//! After every frame (scrolling a link in, moving it, scrolling it out, covering it with a
//! popup, resizing) the model's text must equal the frame's buffer and exactly the cells of
//! the visible label must carry the address.

use dsh_tui::app::PermissionMenu;
use dsh_tui::links::LinkOverlay;
use dsh_tui::view::{draw, ViewCache};
use dsh_tui::{App, Cell, StatusInfo};
use ratatui::backend::CrosstermBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use unicode_width::UnicodeWidthChar;

const URL: &str = "https://example.com/guide";

/// A terminal that understands what ratatui and the overlay write: cursor moves, clears, SGR
/// (ignored), OSC 8 and printable text.
struct Model {
    cols: usize,
    rows: usize,
    cells: Vec<Vec<(String, Option<String>)>>,
    x: usize,
    y: usize,
    link: Option<String>,
}

impl Model {
    fn new(cols: u16, rows: u16) -> Model {
        let (cols, rows) = (usize::from(cols), usize::from(rows));
        Model {
            cols,
            rows,
            cells: vec![vec![(" ".to_string(), None); cols]; rows],
            x: 0,
            y: 0,
            link: None,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        let text = String::from_utf8(bytes.to_vec()).expect("the output is UTF-8");
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                match chars.next() {
                    Some('[') => {
                        let mut params = String::new();
                        let final_byte = loop {
                            let c = chars.next().expect("an unterminated CSI");
                            if ('\x40'..='\x7e').contains(&c) {
                                break c;
                            }
                            params.push(c);
                        };
                        self.csi(&params, final_byte);
                    }
                    Some(']') => {
                        let mut body = String::new();
                        loop {
                            match chars.next().expect("an unterminated OSC") {
                                '\x07' => break,
                                '\x1b' => {
                                    assert_eq!(chars.next(), Some('\\'), "OSC ends with ST");
                                    break;
                                }
                                c => body.push(c),
                            }
                        }
                        let url = body.strip_prefix("8;;").expect("only OSC 8 is written");
                        self.link = (!url.is_empty()).then(|| url.to_string());
                    }
                    other => panic!("unexpected escape {other:?}"),
                }
                continue;
            }
            assert!(!c.is_control(), "a control character {c:?} was written");
            let w = c.width().unwrap_or(0);
            if self.y < self.rows && self.x + w <= self.cols {
                self.cells[self.y][self.x] = (c.to_string(), self.link.clone());
                for extra in 1..w {
                    self.cells[self.y][self.x + extra] = (String::new(), self.link.clone());
                }
            }
            self.x += w;
        }
    }

    fn csi(&mut self, params: &str, final_byte: char) {
        match final_byte {
            'H' => {
                let mut parts = params.split(';').map(|p| p.parse::<usize>().unwrap_or(1));
                self.y = parts.next().unwrap_or(1) - 1;
                self.x = parts.next().unwrap_or(1) - 1;
            }
            'J' if params == "2" => {
                self.cells = vec![vec![(" ".to_string(), None); self.cols]; self.rows];
            }
            // From the cursor to the end of the screen.
            'J' if params.is_empty() || params == "0" => {
                for y in self.y..self.rows {
                    let from = if y == self.y { self.x } else { 0 };
                    for cell in self.cells[y].iter_mut().skip(from) {
                        *cell = (" ".to_string(), None);
                    }
                }
            }
            // Colours and attributes, cursor shown or hidden: no effect on text or links.
            'm' | 'h' | 'l' => {}
            other => panic!("unexpected CSI {params}{other}"),
        }
    }

    fn row(&self, y: usize) -> String {
        self.cells[y].iter().map(|c| c.0.as_str()).collect()
    }

    /// Cells written inside a hyperlink: `(x, y, text, url)`.
    fn linked(&self) -> Vec<(usize, usize, String, String)> {
        let mut out = Vec::new();
        for (y, row) in self.cells.iter().enumerate() {
            for (x, (text, link)) in row.iter().enumerate() {
                if let Some(url) = link {
                    out.push((x, y, text.clone(), url.clone()));
                }
            }
        }
        out
    }
}

fn buffer_row(buffer: &Buffer, y: u16) -> String {
    (0..buffer.area.width)
        .map(|x| buffer[(x, y)].symbol().to_string())
        .collect()
}

/// The cells where the buffer shows the label `the guide` of a link to [`URL`].
fn label_cells(buffer: &Buffer) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for y in 0..buffer.area.height {
        let row = buffer_row(buffer, y);
        if !row.contains(URL) {
            continue;
        }
        if let Some(at) = row.find("the guide") {
            let x = row[..at].chars().count();
            out.extend((x..x + "the guide".len()).map(|x| (x, usize::from(y))));
        }
    }
    out
}

/// What the backend wrote, shared with the test.
#[derive(Clone, Default)]
struct Wire(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl std::io::Write for Wire {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Rig {
    wire: Wire,
    app: App,
    cache: ViewCache,
    overlay: LinkOverlay,
    terminal: Terminal<CrosstermBackend<Wire>>,
    model: Model,
}

impl Rig {
    fn new(cols: u16, rows: u16) -> Rig {
        let mut text = String::new();
        for i in 1..=20 {
            text.push_str(&format!("- intro {i}\n"));
        }
        text.push_str(&format!("\nSee [the guide]({URL}) now.\n\n"));
        for i in 1..=20 {
            text.push_str(&format!("- item {i}\n"));
        }
        Rig::with_text(cols, rows, text)
    }

    fn with_text(cols: u16, rows: u16, text: String) -> Rig {
        let mut app = App::new(StatusInfo {
            model: "m".into(),
            permission: "workspace-write".into(),
            ..StatusInfo::default()
        });
        app.loading = false;
        app.transcript.cells.push(Cell::Assistant {
            text,
            streaming: false,
            interrupted: false,
        });
        let wire = Wire::default();
        let terminal = Terminal::with_options(
            CrosstermBackend::new(wire.clone()),
            TerminalOptions {
                viewport: Viewport::Fixed(Rect::new(0, 0, cols, rows)),
            },
        )
        .unwrap();
        Rig {
            wire,
            app,
            cache: ViewCache::default(),
            overlay: LinkOverlay::default(),
            terminal,
            model: Model::new(cols, rows),
        }
    }

    /// Draws a frame, checks the model against its buffer, returns the label's cells.
    fn frame(&mut self) -> Vec<(usize, usize)> {
        let mut extra = Vec::new();
        let (buffer, expected) = {
            let app = &mut self.app;
            let cache = &mut self.cache;
            let done = self.terminal.draw(|f| draw(f, app, cache)).unwrap();
            self.overlay
                .after_frame(done.buffer, &cache.links, cache.cursor, &mut extra)
                .unwrap();
            (done.buffer.clone(), label_cells(done.buffer))
        };
        let mut bytes = std::mem::take(&mut *self.wire.0.borrow_mut());
        bytes.extend(extra);
        self.model.feed(&bytes);
        for y in 0..buffer.area.height {
            assert_eq!(
                self.model.row(usize::from(y)).trim_end(),
                buffer_row(&buffer, y).trim_end(),
                "row {y} differs from the frame"
            );
        }
        let linked = self.model.linked();
        let cells: Vec<(usize, usize)> = linked.iter().map(|(x, y, ..)| (*x, *y)).collect();
        assert_eq!(cells, expected, "linked cells: {linked:?}");
        assert!(linked.iter().all(|(.., url)| url == URL), "{linked:?}");
        let text: String = linked.iter().map(|(_, _, t, _)| t.as_str()).collect();
        if !expected.is_empty() {
            assert_eq!(text, "the guide");
        }
        expected
    }
}

#[test]
fn links_follow_the_frame_when_scrolled_covered_and_resized() {
    let mut rig = Rig::new(60, 16);
    assert!(rig.frame().is_empty(), "the link starts above the view");
    // Scrolled into view, then moved by scrolling further.
    rig.app.scroll = 12;
    let first = rig.frame();
    assert!(!first.is_empty(), "the link came into view");
    rig.app.scroll = 15;
    let moved = rig.frame();
    assert!(
        !moved.is_empty() && moved != first,
        "{first:?} -> {moved:?}"
    );
    // Unchanged frame: nothing is written again.
    let before = rig.model.linked();
    rig.frame();
    assert_eq!(rig.model.linked(), before);
    // Scrolled out of view at the bottom: no cell keeps the address.
    rig.app.scroll = 0;
    assert!(rig.frame().is_empty());
    // Covered by a popup above the composer.
    rig.app.scroll = 19;
    let shown = rig.frame();
    assert!(!shown.is_empty());
    rig.app.permission_menu = Some(PermissionMenu::new(
        dsh_tools::PermissionPreset::WorkspaceWrite,
    ));
    let covered = rig.frame();
    assert!(covered.is_empty(), "the popup covers the link: {covered:?}");
    rig.app.permission_menu = None;
    assert!(!rig.frame().is_empty());
    // A resize redraws the whole screen; the link is written again.
    rig.terminal.resize(Rect::new(0, 0, 50, 16)).unwrap();
    rig.model = Model::new(50, 16);
    assert!(!rig.frame().is_empty());
}

#[test]
fn a_label_that_takes_a_links_cells_without_being_one_loses_the_address() {
    // The same label in the same style, once a safe link and once not (its address is not
    // one a hyperlink may carry), four rows apart: scrolling by four rows puts the second on
    // the first's cells with the same symbols and style, so ratatui writes nothing there and
    // only the overlay can take the address away.
    let mut text = format!("See [the guide]({URL}) now.\n\nfirst\n\nsecond\n\n");
    text.push_str("See [the guide](javascript:alert) now.\n\n");
    for i in 1..=15 {
        text.push_str(&format!("- item {i}\n"));
    }
    let mut rig = Rig::with_text(60, 16, text);
    let mut checked = 0;
    for scroll in 6..=20 {
        rig.app.scroll = scroll;
        let before = rig.frame();
        // Six rows separate the labels: one jump puts the second where the first was.
        rig.app.scroll = scroll - 6;
        let after = rig.frame();
        if !before.is_empty() && after.is_empty() {
            checked += 1;
        }
    }
    assert!(checked > 0, "no scroll moved the other label onto the link");
}
