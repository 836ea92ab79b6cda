//! `dsh sessions export --format atif` as the real binary (docs/harbor.md, "Trajectories"):
//! a session of the SQLite store gets its sub-agents (kept in the database, or written as JSONL
//! beside it), and costs come from the configured model table, not only the built-in prices.
//! The session is dsh's recording `subagent-multi` (a parent that ran two sub-agents).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_session::{
    export_atif, load_file, load_sub_agent_logs, open_store, AtifOptions, LoadedLog, ModelPrice,
    PriceTable, StoreKind,
};
use serde_json::Value;

fn recording() -> PathBuf {
    dsh_test_support::snapshot_fixtures_dir()
        .parent()
        .unwrap()
        .join("examples/acp-agent/tests/snapshots/subagent-multi")
}

/// `deepseek-v4-flash` at prices no built-in row has.
const CONFIG: &str = "[models.deepseek-v4-flash.price]\ninput = 7.0\ncache_read = 0.5\n\
                      cache_write = 7.0\noutput = 11.0\n";

fn configured() -> PriceTable {
    let mut prices = PriceTable::default();
    prices.models.insert(
        "deepseek-v4-flash".into(),
        ModelPrice {
            input_per_mtok: 7.0,
            cache_read_per_mtok: 0.5,
            cache_write_per_mtok: 7.0,
            output_per_mtok: 11.0,
        },
    );
    prices
}

/// Copies `log` into the SQLite store of `home` (header and events as recorded).
fn import(home: &Path, log: &LoadedLog) -> String {
    let store = open_store(StoreKind::Sqlite, home).unwrap();
    let mut writer = store.create_with_header(log.header.clone()).unwrap();
    for envelope in &log.events {
        writer.append_verbatim(envelope.clone()).unwrap();
    }
    writer.flush().unwrap();
    writer.location()
}

fn export(home: &Path, cwd: &Path, id: &str) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args([
            "sessions", "--store", "sqlite", "export", "--format", "atif", id,
        ])
        .env("DSH_HOME", home)
        .env_remove("DSH_SESSION_STORE")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn cost(t: &Value) -> f64 {
    t["final_metrics"]["total_cost_usd"].as_f64().unwrap()
}

#[test]
fn sqlite_sessions_export_their_sub_agents_at_the_configured_prices() {
    let dir = recording();
    let main = dir.join("session.jsonl");
    let parent = load_file(&main).unwrap();
    let (children, problems) = load_sub_agent_logs(&dir, &main);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(children.len(), 2);

    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), CONFIG).unwrap();
    let location = import(home.path(), &parent);
    let id = parent.header.id.clone();
    // One child kept in the database itself, the other written as JSONL where a sub-agent of
    // a SQLite session writes its log (`sub_agent_anchor`, as `dsh-agent` places it).
    let (in_db, beside) = (&children[0], &children[1]);
    import(home.path(), in_db);
    let folder = dsh_session::sub_agent_anchor(&location)
        .parent()
        .unwrap()
        .join("subagents")
        .join(&beside.header.id);
    assert!(
        folder.starts_with(home.path()),
        "{} is not beside the database",
        folder.display()
    );
    std::fs::create_dir_all(&folder).unwrap();
    let file = dir
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .next()
                .unwrap()
                .contains(&beside.header.id)
        })
        .unwrap();
    std::fs::copy(&file, folder.join("session.jsonl")).unwrap();

    let exported = export(home.path(), cwd.path(), &id);
    let subs = exported["subagent_trajectories"].as_array().unwrap();
    let mut ids: Vec<&str> = subs
        .iter()
        .map(|s| s["trajectory_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut expected = vec![in_db.header.id.as_str(), beside.header.id.as_str()];
    expected.sort_unstable();
    assert_eq!(ids, expected, "both sub-agents are found");

    // The same trajectory as exporting the recording's files at the configured prices.
    let options = |prices| AtifOptions {
        agent_name: "dsh".into(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        prices,
    };
    let reference = export_atif(&parent, &children, &options(configured()));
    assert!((cost(&exported) - cost(&reference)).abs() < 1e-9);
    assert_eq!(exported["steps"], reference["steps"]);
    let built_in = export_atif(&parent, &children, &options(PriceTable::default_deepseek()));
    assert!(
        (cost(&exported) - cost(&built_in)).abs() > 1e-6,
        "the configured prices were not used: {} vs built-in {}",
        cost(&exported),
        cost(&built_in)
    );
    let step_cost = exported["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|s| s["metrics"]["cost_usd"].as_f64())
        .unwrap();
    assert!(step_cost > 0.0);

    // Removing the session removes the sub-agent logs kept beside the database.
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(["sessions", "--store", "sqlite", "rm", "--yes", &id])
        .env("DSH_HOME", home.path())
        .current_dir(cwd.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!folder.exists(), "{} was left behind", folder.display());
}
