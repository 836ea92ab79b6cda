//! `ask_user_question` (and `exit_plan_mode`'s plan review) in the TUI: the form that answers
//! the questions the session's `dsh_protocol::Interactions` holds; the answer goes back as
//! `Op::Answer` (docs/protocol.md, "Approvals and questions"), which checks it.
//!
//! The form shows one question at a time: numbered options (a multi-select question toggles
//! them), then an "Other" row that takes free text, always. Enter confirms the question and
//! moves to the next; after the last one the answers go back to the tool. Esc asks whether to
//! dismiss all the questions, with an optional message for the model. Key handling is pure
//! ([`QuestionForm::on_key`] returns the reply when the form is done), so it is tested
//! without a terminal.

use std::collections::BTreeSet;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use dsh_agent::{QuestionRequest, UserAnswer};
use dsh_protocol::Reply;

/// The user's work on one question.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuestionDraft {
    /// The highlighted row: an option's index, or the number of options for "Other".
    pub highlight: usize,
    /// Toggled options (multi-select).
    pub chosen: BTreeSet<usize>,
    /// Free text typed in the "Other" row.
    pub other: String,
}

/// The questions of one `ask_user_question` call being answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuestionForm {
    /// What the model asked.
    pub request: QuestionRequest,
    /// The question shown.
    pub current: usize,
    /// One draft per question.
    pub drafts: Vec<QuestionDraft>,
    /// While the user dismisses the questions: the message for the model typed so far.
    pub declining: Option<String>,
}

impl QuestionForm {
    /// A form on `request`, at its first question, first option highlighted.
    pub fn new(request: QuestionRequest) -> Self {
        let drafts = vec![QuestionDraft::default(); request.questions.len()];
        QuestionForm {
            request,
            current: 0,
            drafts,
            declining: None,
        }
    }

    /// True when the highlighted row of the current question is "Other" (always the case for
    /// a question without options).
    pub fn on_other(&self) -> bool {
        let options = self
            .request
            .questions
            .get(self.current)
            .map_or(0, |q| q.options.len());
        self.drafts
            .get(self.current)
            .is_none_or(|d| d.highlight >= options)
    }

    /// Applies a key; returns the outcome once the user confirmed the last question or
    /// dismissed them all.
    pub fn on_key(&mut self, key: KeyEvent) -> Option<Reply> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if let Some(message) = self.declining.as_mut() {
            match key.code {
                KeyCode::Enter => return Some(Reply::Decline(message.trim().to_string())),
                KeyCode::Esc => self.declining = None,
                KeyCode::Backspace => {
                    message.pop();
                }
                KeyCode::Char(c) if !ctrl => message.push(c),
                _ => {}
            }
            return None;
        }
        let (Some(question), Some(draft)) = (
            self.request.questions.get(self.current),
            self.drafts.get_mut(self.current),
        ) else {
            // No question at all: nothing to answer.
            return Some(Reply::Answers(Vec::new()));
        };
        let options = question.options.len();
        let on_other = draft.highlight >= options;
        match key.code {
            KeyCode::Esc => self.declining = Some(String::new()),
            KeyCode::Enter => return self.confirm(),
            KeyCode::BackTab => self.current = self.current.saturating_sub(1),
            KeyCode::Up => draft.highlight = draft.highlight.min(options).saturating_sub(1),
            KeyCode::Down => draft.highlight = (draft.highlight + 1).min(options),
            KeyCode::Backspace if on_other => {
                draft.other.pop();
            }
            KeyCode::Char(_) if ctrl => {}
            KeyCode::Char(c) if !on_other && c.is_ascii_digit() && c != '0' => {
                let index = c as usize - '1' as usize;
                if index < options {
                    draft.highlight = index;
                    if question.multi_select {
                        toggle(&mut draft.chosen, index);
                    }
                } else {
                    draft.highlight = options;
                    draft.other.push(c);
                }
            }
            KeyCode::Char(' ') if !on_other && question.multi_select => {
                toggle(&mut draft.chosen, draft.highlight)
            }
            KeyCode::Char(c) => {
                draft.highlight = options;
                draft.other.push(c);
            }
            _ => {}
        }
        None
    }

    /// Adds pasted text to the "Other" answer (or to the dismiss message); newlines become
    /// spaces.
    pub fn on_paste(&mut self, text: &str) {
        let text = text.replace(['\r', '\n'], " ");
        if let Some(message) = self.declining.as_mut() {
            message.push_str(&text);
            return;
        }
        let options = self
            .request
            .questions
            .get(self.current)
            .map_or(0, |q| q.options.len());
        if let Some(draft) = self.drafts.get_mut(self.current) {
            draft.highlight = options;
            draft.other.push_str(&text);
        }
    }

    /// Enter: the next question, or the answers after the last one.
    fn confirm(&mut self) -> Option<Reply> {
        if self.current + 1 < self.request.questions.len() {
            self.current += 1;
            return None;
        }
        Some(Reply::Answers(self.answers()))
    }

    /// The answers as they stand: a single-select question answers its highlighted option
    /// (or the "Other" text); a multi-select one its toggled options plus the "Other" text.
    /// An empty "Other" with nothing chosen is a skipped question (no answer).
    pub fn answers(&self) -> Vec<UserAnswer> {
        self.request
            .questions
            .iter()
            .zip(&self.drafts)
            .map(|(question, draft)| {
                let other = draft.other.trim().to_string();
                let mut answers = Vec::new();
                if question.multi_select {
                    for &index in &draft.chosen {
                        if let Some(option) = question.options.get(index) {
                            answers.push(option.label.clone());
                        }
                    }
                    if !other.is_empty() {
                        answers.push(other);
                    }
                } else if let Some(option) = question.options.get(draft.highlight) {
                    answers.push(option.label.clone());
                } else if !other.is_empty() {
                    answers.push(other);
                }
                UserAnswer {
                    id: question.id.clone(),
                    answers,
                }
            })
            .collect()
    }
}

fn toggle(chosen: &mut BTreeSet<usize>, index: usize) {
    if !chosen.remove(&index) {
        chosen.insert(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_agent::{QuestionOption, UserQuestion};

    fn question(id: &str, options: &[&str], multi_select: bool) -> UserQuestion {
        UserQuestion {
            id: id.into(),
            question: format!("question {id}?"),
            header: None,
            options: options
                .iter()
                .map(|label| QuestionOption {
                    label: (*label).into(),
                    description: None,
                })
                .collect(),
            multi_select,
        }
    }

    fn form(questions: Vec<UserQuestion>) -> QuestionForm {
        QuestionForm::new(QuestionRequest {
            call_id: "call_1".into(),
            questions,
        })
    }

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn press(form: &mut QuestionForm, codes: &[KeyCode]) -> Option<Reply> {
        let mut last = None;
        for code in codes {
            assert!(last.is_none(), "the form finished before {code:?}");
            last = form.on_key(key(*code));
        }
        last
    }

    fn typed(form: &mut QuestionForm, text: &str) {
        for c in text.chars() {
            assert_eq!(form.on_key(key(KeyCode::Char(c))), None);
        }
    }

    fn answer(id: &str, answers: &[&str]) -> UserAnswer {
        UserAnswer {
            id: id.into(),
            answers: answers.iter().map(|a| (*a).to_string()).collect(),
        }
    }

    #[test]
    fn choosing_by_arrow_or_number_then_enter() {
        let mut f = form(vec![
            question("db", &["sqlite", "postgres", "mysql"], false),
            question("lang", &["rust", "go"], false),
        ]);
        // Down twice, Up once: the second option; Enter moves to the next question.
        assert_eq!(
            press(&mut f, &[KeyCode::Down, KeyCode::Down, KeyCode::Up]),
            None
        );
        assert_eq!(press(&mut f, &[KeyCode::Enter]), None);
        assert_eq!(f.current, 1);
        typed(&mut f, "2");
        assert_eq!(
            press(&mut f, &[KeyCode::Enter]),
            Some(Reply::Answers(vec![
                answer("db", &["postgres"]),
                answer("lang", &["go"]),
            ]))
        );
    }

    #[test]
    fn shift_tab_goes_back_and_keeps_the_drafts() {
        let mut f = form(vec![
            question("a", &["x", "y"], false),
            question("b", &["z"], false),
        ]);
        typed(&mut f, "2");
        press(&mut f, &[KeyCode::Enter, KeyCode::BackTab]);
        assert_eq!(f.current, 0);
        assert_eq!(f.drafts[0].highlight, 1);
        assert_eq!(
            press(&mut f, &[KeyCode::Enter, KeyCode::Enter]),
            Some(Reply::Answers(vec![
                answer("a", &["y"]),
                answer("b", &["z"])
            ]))
        );
    }

    #[test]
    fn multi_select_toggles_with_numbers_and_space() {
        let mut f = form(vec![question("tests", &["unit", "e2e", "bench"], true)]);
        typed(&mut f, "3");
        typed(&mut f, "1");
        typed(&mut f, "3"); // toggled off again; `bench` stays highlighted
        press(&mut f, &[KeyCode::Up]);
        typed(&mut f, " "); // toggles the highlighted `e2e`
        assert_eq!(f.drafts[0].chosen, BTreeSet::from([0, 1]));
        assert_eq!(
            press(&mut f, &[KeyCode::Enter]),
            Some(Reply::Answers(vec![answer("tests", &["unit", "e2e"])]))
        );
    }

    #[test]
    fn free_text_goes_to_other_and_can_join_choices() {
        // Typing a letter moves to "Other"; there digits and spaces are text.
        let mut f = form(vec![question("name", &["foo", "bar"], false)]);
        typed(&mut f, "baz 2");
        assert!(f.on_other());
        press(&mut f, &[KeyCode::Backspace]);
        assert_eq!(
            press(&mut f, &[KeyCode::Enter]),
            Some(Reply::Answers(vec![answer("name", &["baz"])]))
        );

        let mut f = form(vec![question("extras", &["docs", "ci"], true)]);
        typed(&mut f, "2");
        typed(&mut f, "also a changelog");
        assert_eq!(
            press(&mut f, &[KeyCode::Enter]),
            Some(Reply::Answers(vec![answer(
                "extras",
                &["ci", "also a changelog"]
            )]))
        );

        // A question without options is a text field; an empty one is skipped.
        let mut f = form(vec![
            question("why", &[], false),
            question("more", &[], false),
        ]);
        assert!(f.on_other());
        typed(&mut f, "1 because");
        f.on_paste(" it\nworks");
        assert_eq!(
            press(&mut f, &[KeyCode::Enter, KeyCode::Enter]),
            Some(Reply::Answers(vec![
                answer("why", &["1 because it works"]),
                answer("more", &[]),
            ]))
        );
    }

    #[test]
    fn highlighting_an_option_again_answers_it_not_the_text() {
        let mut f = form(vec![question("q", &["a", "b"], false)]);
        typed(&mut f, "zz");
        press(&mut f, &[KeyCode::Up]);
        assert_eq!(f.drafts[0].highlight, 1);
        assert_eq!(
            press(&mut f, &[KeyCode::Enter]),
            Some(Reply::Answers(vec![answer("q", &["b"])]))
        );
    }

    #[test]
    fn esc_declines_with_an_optional_message_and_esc_again_returns() {
        let mut f = form(vec![question("q", &["a"], false)]);
        press(&mut f, &[KeyCode::Esc]);
        assert_eq!(f.declining.as_deref(), Some(""));
        typed(&mut f, "not now");
        // Esc leaves the dismiss prompt; the answer is untouched.
        press(&mut f, &[KeyCode::Esc]);
        assert_eq!(f.declining, None);
        press(&mut f, &[KeyCode::Esc]);
        typed(&mut f, "decide yourselff");
        press(&mut f, &[KeyCode::Backspace]);
        assert_eq!(
            press(&mut f, &[KeyCode::Enter]),
            Some(Reply::Decline("decide yourself".into()))
        );

        let mut f = form(vec![question("q", &[], false)]);
        assert_eq!(
            press(&mut f, &[KeyCode::Esc, KeyCode::Enter]),
            Some(Reply::Decline(String::new()))
        );
    }
}
