//! `/model` and `/effort` with the model table (docs/configuration.md, "Keys"): `/effort`
//! offers and accepts only the efforts the model takes (refused before any request, with the
//! list), and `/model` carries a valid effort to the new model, saying when it changed it.

use dsh_agent::AgentHandle;
use dsh_llm::{effort_names, CallConfig, ReasoningEffort};
use dsh_runtime::SessionFactory;

use crate::app::App;
use crate::transcript::NoticeLevel;

fn info(app: &mut App, text: String) {
    app.transcript.notice(NoticeLevel::Info, text);
}

fn show_effort(app: &mut App, effort: Option<ReasoningEffort>) {
    let text = effort.map(|e| e.as_str().to_string());
    app.status.effort = text.clone();
    app.transcript.stats.effort = text;
}

/// `/model [id]`: shows the model, or switches it from the next request, with an effort the
/// new model takes.
pub(crate) fn switch_model(
    app: &mut App,
    call: &mut CallConfig,
    handle: &AgentHandle,
    factory: &dyn SessionFactory,
    model: Option<String>,
) {
    let Some(model) = model else {
        let text = format!(
            "model: {} (switch with /model <id>, e.g. deepseek-v4-flash, deepseek-v4-pro)",
            call.model
        );
        return info(app, text);
    };
    call.model = model.clone();
    let note = factory.model_info(&model).and_then(|described| {
        let carried = described.carry_effort(call.reasoning_effort);
        call.reasoning_effort = carried.effort;
        carried.note
    });
    handle.set_call(call.clone());
    app.status.model = model.clone();
    app.transcript.stats.model = Some(model.clone());
    show_effort(app, call.reasoning_effort);
    info(app, format!("model set to {model} from the next request"));
    if let Some(note) = note {
        info(app, note);
    }
}

/// `/effort [level]`: shows the effort and the ones the model takes, or switches it from the
/// next request; an effort the model does not take is refused here, before any request.
pub(crate) fn switch_effort(
    app: &mut App,
    call: &mut CallConfig,
    handle: &AgentHandle,
    factory: &dyn SessionFactory,
    text: Option<String>,
) {
    let described = factory.model_info(&call.model);
    let choices = described.as_ref().map_or_else(
        || "off, low, medium, high, max".to_string(),
        |d| effort_names(&d.offered_efforts()),
    );
    let Some(text) = text else {
        let current = call
            .reasoning_effort
            .map_or("model default", |e| e.as_str());
        return info(
            app,
            format!(
                "reasoning effort: {current} ({} takes: {choices})",
                call.model
            ),
        );
    };
    let Some(effort) = ReasoningEffort::parse(&text) else {
        app.hint = Some(format!("unknown effort `{text}`: {choices}"));
        return;
    };
    if let Some(Err(refused)) = described.map(|d| d.check_effort(effort)) {
        app.hint = Some(refused);
        return;
    }
    call.reasoning_effort = Some(effort);
    handle.set_call(call.clone());
    show_effort(app, Some(effort));
    info(
        app,
        format!("effort set to {} from the next request", effort.as_str()),
    );
}
