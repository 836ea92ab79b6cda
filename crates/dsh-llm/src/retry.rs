//! The retry policy (docs/agent.md, "Retries"), as a pure function the loop calls after a failed
//! attempt.

use std::time::Duration;

use crate::failure::{Failure, FailureCode};

/// When and how long to wait before trying a failed model call again.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (default 5).
    pub max_retries: u32,
    /// Delay before the first retry; doubles each retry (default 500 ms).
    pub base_delay: Duration,
    /// Ceiling of the computed delay (default 10 s).
    pub max_delay: Duration,
    /// Relative jitter applied to the computed delay (default 0.1 = +-10%).
    pub jitter: f64,
    /// A provider `Retry-After` up to this long replaces the computed delay; above it the
    /// policy gives up (default 60 s).
    pub retry_after_cap: Duration,
    /// Codes worth another attempt.
    pub retryable: Vec<FailureCode>,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryDecision {
    /// Wait `delay`, then try again; this will be retry number `retry` (1-based).
    Retry {
        /// The number of the coming retry, from 1.
        retry: u32,
        /// How long to wait before it.
        delay: Duration,
    },
    /// Stop; `reason` explains why, for the user.
    GiveUp {
        /// The explanation.
        reason: String,
    },
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
            jitter: 0.1,
            retry_after_cap: Duration::from_secs(60),
            retryable: vec![
                FailureCode::EmptyResponse,
                FailureCode::RateLimit,
                FailureCode::Server,
                FailureCode::Timeout,
                FailureCode::Transport,
                FailureCode::StreamClosed,
                FailureCode::MissingFinish,
            ],
        }
    }
}

impl RetryPolicy {
    /// Decides about `failure` after `retries_done` retries of this step (0 after the first
    /// attempt). `jitter_unit` is a number in `-1.0..=1.0` supplied by the caller (random in
    /// production, fixed in tests); it scales the +-`jitter` band.
    pub fn decide(&self, failure: &Failure, retries_done: u32, jitter_unit: f64) -> RetryDecision {
        if !self.retryable.contains(&failure.code) {
            return RetryDecision::GiveUp {
                reason: format!("{} is not retryable", failure.code),
            };
        }
        if retries_done >= self.max_retries {
            return RetryDecision::GiveUp {
                reason: format!(
                    "gave up after {} {}",
                    retries_done,
                    if retries_done == 1 {
                        "retry"
                    } else {
                        "retries"
                    }
                ),
            };
        }
        let retry = retries_done + 1;
        if let Some(ms) = failure.retry_after_ms {
            let asked = Duration::from_millis(ms);
            if asked > self.retry_after_cap {
                return RetryDecision::GiveUp {
                    reason: format!(
                        "the provider asked to wait {:.1} s, longer than the retry-after cap of {:.1} s",
                        asked.as_secs_f64(),
                        self.retry_after_cap.as_secs_f64()
                    ),
                };
            }
            return RetryDecision::Retry {
                retry,
                delay: asked,
            };
        }
        let exponent = (retry - 1).min(31);
        let computed = self
            .base_delay
            .saturating_mul(1u32 << exponent)
            .min(self.max_delay);
        let factor = 1.0 + self.jitter * jitter_unit.clamp(-1.0, 1.0);
        RetryDecision::Retry {
            retry,
            delay: computed.mul_f64(factor.max(0.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(code: FailureCode) -> Failure {
        Failure::new(code, "x")
    }

    #[test]
    fn delays_double_up_to_the_ceiling() {
        let p = RetryPolicy::default();
        let delays: Vec<u128> = (0..5)
            .map(|n| match p.decide(&fail(FailureCode::Server), n, 0.0) {
                RetryDecision::Retry { delay, .. } => delay.as_millis(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(delays, vec![500, 1000, 2000, 4000, 8000]);
        let mut long = p.clone();
        long.max_retries = 10;
        assert_eq!(
            long.decide(&fail(FailureCode::Server), 7, 0.0),
            RetryDecision::Retry {
                retry: 8,
                delay: Duration::from_secs(10)
            }
        );
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let p = RetryPolicy::default();
        for (unit, expect) in [(1.0, 1100), (-1.0, 900), (5.0, 1100)] {
            match p.decide(&fail(FailureCode::Timeout), 1, unit) {
                RetryDecision::Retry { delay, .. } => assert_eq!(delay.as_millis(), expect),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn retry_after_replaces_delay_or_gives_up_above_cap() {
        let p = RetryPolicy::default();
        let mut f = fail(FailureCode::RateLimit);
        f.retry_after_ms = Some(3000);
        assert_eq!(
            p.decide(&f, 0, 1.0),
            RetryDecision::Retry {
                retry: 1,
                delay: Duration::from_secs(3)
            }
        );
        f.retry_after_ms = Some(120_000);
        assert!(
            matches!(p.decide(&f, 0, 0.0), RetryDecision::GiveUp { reason } if reason.contains("cap"))
        );
    }

    #[test]
    fn incomplete_replies_are_retried_like_a_closed_stream() {
        let p = RetryPolicy::default();
        for code in [FailureCode::StreamClosed, FailureCode::MissingFinish] {
            assert!(
                matches!(
                    p.decide(&fail(code.clone()), 0, 0.0),
                    RetryDecision::Retry { .. }
                ),
                "{code} is retried"
            );
        }
    }

    #[test]
    fn non_retryable_and_exhausted_give_up() {
        let p = RetryPolicy::default();
        assert!(matches!(
            p.decide(&fail(FailureCode::Auth), 0, 0.0),
            RetryDecision::GiveUp { .. }
        ));
        assert!(matches!(
            p.decide(&fail(FailureCode::Aborted), 0, 0.0),
            RetryDecision::GiveUp { .. }
        ));
        assert!(matches!(
            p.decide(&fail(FailureCode::Server), 5, 0.0),
            RetryDecision::GiveUp { reason } if reason.contains("5 retries")
        ));
    }
}
