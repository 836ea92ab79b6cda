//! Images in the session log (docs/sessions.md, "Images"), on both stores: stored once as a
//! private file beside the session, referenced by the events, loaded back on resume, copied by
//! fork, carried by the zip export, and a missing file is a placeholder, never a panic.

use std::io::Read as _;

use dsh_llm::{ContentBlock, ImageAttachment, Message, MessageSource, Role};
use dsh_session::{
    fork, open_store, zip_image_entries, Event, SessionStore, StoreKind, TurnEnd, TurnEndReason,
    TurnStart,
};

use dsh_test_support::images::RED_PNG;
const RED_FILE: &str = "b1ff9c8ea3a780bad09b346c423d2d0e46815926879b18e841d928376a946640.png";

fn image_message(id: &str) -> Message {
    Message {
        id: id.into(),
        role: Role::User,
        content: vec![
            ContentBlock::text("look"),
            ContentBlock::Image {
                attachment: ImageAttachment::from_bytes(RED_PNG.to_vec(), Some("red.png")).unwrap(),
            },
        ],
        source: MessageSource::User,
    }
}

/// A session with one closed turn whose user message and tool result carry the same image.
fn write_session(store: &dyn SessionStore) -> String {
    let mut log = store.create("/work/project", Default::default()).unwrap();
    log.append(Event::TurnStart(TurnStart { turn: 1 })).unwrap();
    log.append(Event::UserMessage(image_message("u1"))).unwrap();
    let result = Message::tool_result("r1", "c1", image_message("x").content, false);
    log.append(Event::UserMessage(result)).unwrap();
    log.append(Event::TurnEnd(TurnEnd {
        turn: 1,
        reason: TurnEndReason::Completed,
    }))
    .unwrap();
    log.flush().unwrap();
    log.header().id.clone()
}

fn image_of(message: &Message) -> Option<&ImageAttachment> {
    message.content.iter().find_map(|b| match b {
        ContentBlock::Image { attachment } => Some(attachment),
        ContentBlock::ToolResult { content, .. } => content.iter().find_map(|b| match b {
            ContentBlock::Image { attachment } => Some(attachment),
            _ => None,
        }),
        _ => None,
    })
}

fn round_trip(kind: StoreKind) {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let store = open_store(kind, home.path()).unwrap();
    let id = write_session(store.as_ref());

    // Stored once, private; the log holds the reference only, never base64.
    let blobs = store.blobs(&id).unwrap();
    let files: Vec<_> = std::fs::read_dir(blobs.dir()).unwrap().collect();
    assert_eq!(files.len(), 1, "one file for two references");
    let file = blobs.dir().join(RED_FILE);
    assert_eq!(std::fs::read(&file).unwrap(), RED_PNG);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let log = store.load(&id).unwrap();
    let encoded = dsh_session::encode_jsonl(&log.header, &log.events, false).unwrap();
    let text = String::from_utf8(encoded).unwrap();
    assert!(
        text.contains("\"attachmentId\":\"sha256:b1ff9c8e"),
        "{text}"
    );
    assert!(!text.contains("iVBORw0KGgo"), "no inline base64 in the log");

    // Resume loads the bytes into the projected history.
    let resumed = store.resume(&id).unwrap();
    assert!(resumed.image_problems.is_empty());
    let history = resumed.history.history();
    for message in &history {
        let image = image_of(message).expect("each message keeps its image");
        assert_eq!(image.data.as_deref(), Some(RED_PNG));
    }
    drop(resumed);

    // Fork copies the file into the new session's folder.
    let forked = fork(store.as_ref(), &id, None).unwrap();
    let fork_blobs = store.blobs(&forked.id).unwrap();
    assert_ne!(fork_blobs.dir(), blobs.dir());
    assert_eq!(
        std::fs::read(fork_blobs.dir().join(RED_FILE)).unwrap(),
        RED_PNG
    );
    let resumed = store.resume(&forked.id).unwrap();
    assert!(resumed.image_problems.is_empty());
    drop(resumed);

    // Zip export carries the file.
    let entries = zip_image_entries(&blobs, log.events.iter().map(|e| &e.event));
    let mut zip_bytes = std::io::Cursor::new(Vec::new());
    dsh_session::export_zip(&mut zip_bytes, b"{}\n", &entries).unwrap();
    let mut archive = zip::ZipArchive::new(zip_bytes).unwrap();
    let mut entry = archive.by_name(&format!("blobs/{RED_FILE}")).unwrap();
    let mut data = Vec::new();
    entry.read_to_end(&mut data).unwrap();
    assert_eq!(data, RED_PNG);
    drop(entry);

    // A missing file: resume still works; the image becomes a placeholder and is reported.
    std::fs::remove_file(&file).unwrap();
    let resumed = store.resume(&id).unwrap();
    assert_eq!(resumed.image_problems.len(), 2);
    let first = &resumed.history.history()[0];
    assert!(image_of(first).is_none());
    assert!(
        first.text().contains("could not be read"),
        "{}",
        first.text()
    );
}

#[test]
fn images_round_trip_through_the_jsonl_store() {
    round_trip(StoreKind::Jsonl);
}

#[test]
fn images_round_trip_through_the_sqlite_store() {
    round_trip(StoreKind::Sqlite);
}
