//! Turn budgets for unattended runs (docs/harbor.md, "Budgets"): most steps, most wall time and
//! most cost of one turn. A budget that runs out ends the turn with `turn/end {kind: "error"}`
//! whose failure code names the budget (`BUDGET_STEPS`, `BUDGET_WALL_TIME`, `BUDGET_COST`), so
//! the log, `dsh run --json`'s result line and ACP all tell which one it was.

use std::collections::BTreeMap;
use std::time::Duration;

use dsh_llm::{Failure, FailureCode, UsageTotals};
use dsh_session::PriceTable;

/// Failure code of a turn that used its step budget.
pub const BUDGET_STEPS: &str = "BUDGET_STEPS";
/// Failure code of a turn that used its wall-time budget.
pub const BUDGET_WALL_TIME: &str = "BUDGET_WALL_TIME";
/// Failure code of a turn that used its cost budget.
pub const BUDGET_COST: &str = "BUDGET_COST";

/// The budget a turn end stands for (`steps`, `wall_time`, `cost`), when a budget ended it:
/// the one spelling `dsh run --json`'s `budget` and ACP's `_meta.dsh.budget` use.
pub fn budget_of(reason: &dsh_session::TurnEndReason) -> Option<&'static str> {
    let dsh_session::TurnEndReason::Error { error } = reason else {
        return None;
    };
    match error.code.as_str().as_ref() {
        BUDGET_STEPS => Some("steps"),
        BUDGET_WALL_TIME => Some("wall_time"),
        BUDGET_COST => Some("cost"),
        _ => None,
    }
}

/// Limits of one turn; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TurnBudget {
    /// Most model calls (steps) in the turn.
    pub max_steps: Option<u64>,
    /// Longest time the turn may run; the running step is cancelled when it passes.
    pub max_wall_time: Option<Duration>,
    /// Most USD the turn may spend: every billed call of the turn (its steps, failed replies,
    /// compaction, tools' own calls, its sub-agents'), the same usage the turn reports
    /// ([`crate::TurnOutcome::usage_by_model`]), each model at its price in the session's price
    /// table. Checked before each step: the step that crosses the limit finishes, the next one
    /// does not start.
    pub max_cost_usd: Option<f64>,
}

impl TurnBudget {
    /// True when no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == TurnBudget::default()
    }

    /// The failure that ends the turn before step `step` (1-based), if a budget is used up: more
    /// steps than allowed, or the cost of `spent` (the turn's usage so far, per model) at or
    /// above the limit. A cost limit with a model without a price (the session's `model`, or
    /// one the turn spent on) ends the turn too: the budget cannot be kept without knowing the
    /// cost.
    pub fn check_before_step(
        &self,
        step: u64,
        spent: &BTreeMap<String, UsageTotals>,
        model: &str,
        prices: &PriceTable,
    ) -> Option<Failure> {
        if let Some(max) = self.max_steps {
            if step > max {
                return Some(Failure::new(
                    FailureCode::Other(BUDGET_STEPS.into()),
                    format!("the step budget ({max} steps) is used up; the turn stopped"),
                ));
            }
        }
        let max = self.max_cost_usd?;
        let unpriced = std::iter::once(model)
            .chain(spent.keys().map(String::as_str))
            .find(|model| !prices.models.contains_key(*model));
        if let Some(model) = unpriced {
            return Some(Failure::new(
                FailureCode::Other(BUDGET_COST.into()),
                format!(
                    "a cost budget is set but model `{model}` has no price; add one under \
                     [models.{model}.price] in config.toml (input, output, cache_read in USD \
                     per million tokens) or drop the cost budget"
                ),
            ));
        }
        let spent = prices.cost(spent).unwrap_or(f64::INFINITY);
        (spent >= max).then(|| {
            Failure::new(
                FailureCode::Other(BUDGET_COST.into()),
                format!(
                    "the cost budget ({}) is used up: {} spent; the turn stopped",
                    usd(max),
                    usd(spent)
                ),
            )
        })
    }

    /// The failure of a turn cancelled because its wall time passed.
    pub fn wall_time_failure(&self) -> Failure {
        let secs = self.max_wall_time.map_or(0.0, |d| d.as_secs_f64());
        Failure::new(
            FailureCode::Other(BUDGET_WALL_TIME.into()),
            format!(
                "the wall-time budget ({secs:.1} s) is used up; the running step was cancelled"
            ),
        )
    }
}

/// A dollar amount as people read it: cents for a dollar or more, four significant digits
/// below that, so a small spend never shows as `$0.00` or `$0.0000` (`$0.50`, `$0.000031`,
/// `$0.0000004`, `$12.35`).
fn usd(amount: f64) -> String {
    if amount >= 1.0 || amount <= 0.0 || !amount.is_finite() {
        return format!("${amount:.2}");
    }
    // Decimals for four significant digits: 0.0123 has its first digit at the second
    // decimal, so 5. Counted, not `log10`: that would make the binary load libm
    // (crates/dsh-cli/src/math_symbols.rs).
    let mut first = 1;
    let mut scaled = amount * 10.0;
    while scaled < 1.0 {
        scaled *= 10.0;
        first += 1;
    }
    let decimals = first + 3;
    let text = format!("{amount:.decimals$}");
    let trimmed = text.trim_end_matches('0');
    let kept = trimmed.split('.').nth(1).map_or(0, str::len);
    if kept < 2 {
        format!("${amount:.2}")
    } else {
        format!("${trimmed}")
    }
}

/// Parses a duration such as `90`, `90s`, `15m`, `2h` or `500ms` (plain numbers are seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: use e.g. 90s, 15m or 2h"))?;
    let secs = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit `{other}` in `{text}`: use ms, s, m or h"
            ))
        }
    };
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("`{text}` is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
    }

    #[test]
    fn cost_budget_without_a_price_refuses() {
        let budget = TurnBudget {
            max_cost_usd: Some(1.0),
            ..TurnBudget::default()
        };
        let failure = budget
            .check_before_step(1, &BTreeMap::new(), "no-such-model", &PriceTable::default())
            .unwrap();
        assert_eq!(failure.code.as_str(), BUDGET_COST);
        assert!(
            failure.message.contains("[models.no-such-model.price]"),
            "the error names the key that exists: {}",
            failure.message
        );
    }

    #[test]
    fn cost_counts_every_model_the_turn_spent_on() {
        let budget = TurnBudget {
            max_cost_usd: Some(0.01),
            ..TurnBudget::default()
        };
        let prices = PriceTable::default_deepseek();
        let million = |input_tokens| {
            let mut totals = UsageTotals::default();
            totals.add(&dsh_llm::Usage {
                input_tokens,
                ..dsh_llm::Usage::default()
            });
            totals
        };
        // Under the limit on the session's model alone, over it with a child's on another.
        let mut spent = BTreeMap::from([("deepseek-v4-flash".to_string(), million(50_000))]);
        assert!(budget
            .check_before_step(2, &spent, "deepseek-v4-flash", &prices)
            .is_none());
        spent.insert("deepseek-v4-pro".into(), million(50_000));
        let failure = budget
            .check_before_step(2, &spent, "deepseek-v4-flash", &prices)
            .unwrap();
        assert_eq!(failure.code.as_str(), BUDGET_COST);
        // A model the turn spent on without a price: the cost is not known.
        spent.insert("unpriced".into(), million(1));
        let failure = budget
            .check_before_step(2, &spent, "deepseek-v4-flash", &prices)
            .unwrap();
        assert!(
            failure.message.contains("`unpriced`"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn small_amounts_keep_their_digits() {
        assert_eq!(usd(0.000031), "$0.000031");
        assert_eq!(usd(0.5), "$0.50");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(12.345), "$12.35");
        assert_eq!(usd(0.0012), "$0.0012");
        // Below a millionth a spend keeps its first digits instead of becoming $0.00.
        assert_eq!(usd(0.000_000_4), "$0.0000004");
        assert_eq!(usd(0.000_123_456), "$0.0001235");
        assert_eq!(usd(0.123_456), "$0.1235");
        assert_eq!(usd(0.999_96), "$1.00");
    }
}
