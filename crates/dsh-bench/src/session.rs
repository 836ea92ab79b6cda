//! Session log throughput on the synthetic log of the `dsh-session` benches
//! (`crates/dsh-session/benches/common.rs`, reused as is): append of `events` events with the
//! real flush policy, and load + project of the written log; each against a `serde_json` floor
//! doing the same I/O (same bytes parsed; same JSON content written with the same fsyncs).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::time::Instant;

use anyhow::Context;
use dsh_session::{
    is_sync_point, session_path, Envelope, Event, JsonlWriter, LogReader, Projector, SessionHeader,
    SessionWriter,
};
use serde_json::{json, Value};

use crate::stats::median;
use crate::synthetic_log::synthetic_events;

/// After which of `events` the loop's writer fsyncs: its sync points, and the flush before each
/// model call (which follows `step/start`) unless only `step/start` came since the last sync
/// (docs/sessions.md, "Durability and crash repair"). The floor syncs at the same points.
fn syncs_after(events: &[Event]) -> Vec<bool> {
    let mut only_step_starts = false;
    events
        .iter()
        .map(|event| {
            let step_start = matches!(event, Event::StepStart(_));
            let sync = is_sync_point(event) || (step_start && !only_step_starts);
            only_step_starts = sync || (step_start && only_step_starts);
            sync
        })
        .collect()
}

fn append_dsh(
    dir: &std::path::Path,
    events: &[Event],
    pack: bool,
) -> anyhow::Result<(f64, std::path::PathBuf)> {
    let path = session_path(dir, "/bench", "bench");
    let start = Instant::now();
    let mut writer = JsonlWriter::create(&path, SessionHeader::new("bench", "/bench", 0))?;
    writer.set_packing(pack);
    for event in events.iter().cloned() {
        let before_call = matches!(event, Event::StepStart(_));
        writer.append(event)?;
        if before_call {
            writer.flush()?;
        }
    }
    writer.flush()?;
    drop(writer);
    Ok((start.elapsed().as_secs_f64() * 1000.0, path))
}

/// The same JSON content (one line per event, as parsed `Value`s), written with `serde_json`
/// and fsynced at the same points.
fn append_floor(path: &std::path::Path, lines: &[(Value, bool)]) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut file = File::create(path)?;
    let mut buf = Vec::with_capacity(1 << 16);
    for (value, flush) in lines {
        serde_json::to_writer(&mut buf, value)?;
        buf.push(b'\n');
        if *flush {
            file.write_all(&buf)?;
            buf.clear();
            file.sync_data()?;
        }
    }
    file.write_all(&buf)?;
    file.sync_data()?;
    Ok(start.elapsed().as_secs_f64() * 1000.0)
}

fn load_dsh(path: &std::path::Path) -> anyhow::Result<(f64, usize)> {
    let start = Instant::now();
    let mut reader = LogReader::open(path)?;
    let mut projector = Projector::new();
    while let Some(env) = reader.next_event()? {
        projector.push_owned(env)?;
    }
    Ok((start.elapsed().as_secs_f64() * 1000.0, projector.len()))
}

fn load_floor(path: &std::path::Path) -> anyhow::Result<(f64, usize)> {
    let start = Instant::now();
    let mut reader = BufReader::with_capacity(256 * 1024, File::open(path)?);
    let mut line = Vec::new();
    let mut count = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let value: Value = serde_json::from_slice(&line)?;
        count += usize::from(!value.is_null());
    }
    Ok((start.elapsed().as_secs_f64() * 1000.0, count))
}

/// Append and load of `events` events, `runs` times each (median).
pub(crate) fn session(events: usize, runs: usize) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir_in(std::env::temp_dir())?;
    let synthetic = synthetic_events(events);
    let syncs = syncs_after(&synthetic);
    let flushes = syncs.iter().filter(|&&sync| sync).count();

    // The floor's input: the same events as JSON values (one line per event, unpacked).
    let mut lines: Vec<(Value, bool)> = Vec::with_capacity(events);
    let mut line = Vec::new();
    for ((seq, event), &sync) in synthetic.iter().enumerate().zip(&syncs) {
        let mut envelope = Envelope::new(event.clone());
        envelope.seq = seq as u64;
        envelope.time = Some(0);
        line.clear();
        envelope.encode_line(&mut line)?;
        let value = serde_json::from_slice(&line).context("an encoded event line")?;
        lines.push((value, sync));
    }

    let mut dsh_append = Vec::new();
    let mut floor_append = Vec::new();
    let mut dsh_load = Vec::new();
    let mut floor_load = Vec::new();
    let mut packed_bytes = 0;
    let mut history = 0;
    for run in 0..runs {
        let (ms, packed) = append_dsh(&dir.path().join(format!("packed{run}")), &synthetic, true)?;
        dsh_append.push(ms);
        packed_bytes = std::fs::metadata(&packed)?.len();
        floor_append.push(append_floor(
            &dir.path().join(format!("floor{run}.jsonl")),
            &lines,
        )?);
        let (ms, len) = load_dsh(&packed)?;
        history = len;
        dsh_load.push(ms);
        floor_load.push(load_floor(&packed)?.0);
    }
    Ok(json!({
        "events": events,
        "fsyncs": flushes,
        "packed_bytes": packed_bytes,
        "history_messages": history,
        "append_ms": median(&mut dsh_append),
        "append_floor_ms": median(&mut floor_append),
        "load_ms": median(&mut dsh_load),
        "load_floor_ms": median(&mut floor_load),
        "runs": runs,
    }))
}
