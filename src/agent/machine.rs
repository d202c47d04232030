//! The stage machine as data: the stages, the outcomes each can end with, the table of
//! transitions, and the budgets that stop the loop.
//!
//! ```text
//! generate --proposed--> compile --compiled--> validate --correct--> optimize
//!    ^                     |                     |                     |
//!    |                  failed                 wrong               proposed -> compile
//!    |                     v                     v
//!    +--(no good kernel)-- debug <---------------+
//!        debug exhausted     |--proposed--> compile
//!                            +--(a good kernel exists) debug exhausted --> optimize (revert)
//! ```

use serde::{Deserialize, Serialize};

/// Where the loop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Generate,
    Compile,
    Validate,
    Debug,
    Optimize,
    Done,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Generate => "generate",
            Stage::Compile => "compile",
            Stage::Validate => "validate",
            Stage::Debug => "debug",
            Stage::Optimize => "optimize",
            Stage::Done => "done",
        }
    }
}

/// How a stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The provider answered with a kernel.
    Proposed,
    /// The provider has nothing more to offer.
    ProviderExhausted,
    /// The reply had no usable code, even after the repair request.
    NoCode,
    Compiled,
    CompileFailed,
    /// Correct on every shape and seed (then accepted or rejected on speed).
    Correct,
    /// Wrong results or a fault.
    Wrong,
    /// Too many failed debug attempts; a correct version exists to go back to.
    DebugExhaustedWithBest,
    /// Too many failed debug attempts and nothing correct yet: start over.
    DebugExhaustedNoBest,
    /// Too many regenerations without a correct kernel.
    GiveUp,
    /// A budget ran out or the goal was reached.
    Stop,
}

/// The transitions: (stage, outcome) -> next stage. Anything not listed is a bug the
/// engine reports instead of guessing.
pub const TRANSITIONS: &[(Stage, Outcome, Stage)] = &[
    (Stage::Generate, Outcome::Proposed, Stage::Compile),
    (Stage::Generate, Outcome::NoCode, Stage::Generate),
    (Stage::Generate, Outcome::ProviderExhausted, Stage::Done),
    (Stage::Generate, Outcome::GiveUp, Stage::Done),
    (Stage::Compile, Outcome::Compiled, Stage::Validate),
    (Stage::Compile, Outcome::CompileFailed, Stage::Debug),
    (Stage::Validate, Outcome::Correct, Stage::Optimize),
    (Stage::Validate, Outcome::Wrong, Stage::Debug),
    (Stage::Debug, Outcome::Proposed, Stage::Compile),
    (Stage::Debug, Outcome::NoCode, Stage::Debug),
    (
        Stage::Debug,
        Outcome::DebugExhaustedWithBest,
        Stage::Optimize,
    ),
    (Stage::Debug, Outcome::DebugExhaustedNoBest, Stage::Generate),
    (Stage::Debug, Outcome::ProviderExhausted, Stage::Done),
    (Stage::Optimize, Outcome::Proposed, Stage::Compile),
    (Stage::Optimize, Outcome::NoCode, Stage::Optimize),
    (Stage::Optimize, Outcome::ProviderExhausted, Stage::Done),
    (Stage::Generate, Outcome::Stop, Stage::Done),
    (Stage::Debug, Outcome::Stop, Stage::Done),
    (Stage::Optimize, Outcome::Stop, Stage::Done),
    (Stage::Compile, Outcome::Stop, Stage::Done),
    (Stage::Validate, Outcome::Stop, Stage::Done),
];

/// The next stage, or `None` for a pair the table does not have.
pub fn next(stage: Stage, outcome: Outcome) -> Option<Stage> {
    TRANSITIONS
        .iter()
        .find(|(s, o, _)| *s == stage && *o == outcome)
        .map(|(_, _, n)| *n)
}

/// What a session may spend, and when it is done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Budgets {
    /// Failed debug attempts in a row before reverting or regenerating.
    pub debug_attempts: u32,
    /// Fresh generations (after the first) before giving up without a correct kernel.
    pub regenerations: u32,
    /// Optimization rounds (candidates proposed in the optimize stage).
    pub rounds: u32,
    /// Stop after this many optimization rounds in a row bring no accepted version.
    pub patience: u32,
    /// Model tokens (prompt + completion) over the session; 0 = no limit.
    pub tokens: u64,
    /// Dollars over the session; 0 = no limit.
    pub cost_usd: f64,
    /// Wall-clock seconds over the session (resumes add up); 0 = no limit.
    pub wall_s: f64,
    /// Stop once the best version reaches this fraction of the roofline floor; 0 = never.
    pub roofline_target: f64,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            debug_attempts: 3,
            regenerations: 2,
            rounds: 8,
            patience: 4,
            tokens: 0,
            cost_usd: 0.0,
            wall_s: 0.0,
            roofline_target: 0.95,
        }
    }
}

/// What a session has spent so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    pub rounds: u32,
    pub rounds_without_gain: u32,
    pub debug_attempts: u32,
    pub regenerations: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost_usd: f64,
    pub wall_s: f64,
    pub model_requests: u32,
    /// Seconds evaluations held the GPU (worker wall time: validation, timing, the probe).
    #[serde(default)]
    pub gpu_s: f64,
}

impl Budgets {
    /// Why the session must stop before asking for another version, if it must. The
    /// round, patience and goal limits apply once a correct version exists (`has_best`).
    pub fn exhausted(
        &self,
        s: &Spent,
        has_best: bool,
        best_roofline: Option<f64>,
    ) -> Option<String> {
        if self.tokens > 0 && s.prompt_tokens + s.completion_tokens >= self.tokens {
            return Some(format!(
                "token budget spent ({} of {})",
                s.prompt_tokens + s.completion_tokens,
                self.tokens
            ));
        }
        if self.cost_usd > 0.0 && s.cost_usd >= self.cost_usd {
            return Some(format!(
                "cost budget spent (${:.2} of ${:.2})",
                s.cost_usd, self.cost_usd
            ));
        }
        if self.wall_s > 0.0 && s.wall_s >= self.wall_s {
            return Some(format!(
                "time budget spent ({:.0} s of {:.0} s)",
                s.wall_s, self.wall_s
            ));
        }
        if let Some(f) = best_roofline {
            if self.roofline_target > 0.0 && f >= self.roofline_target {
                return Some(format!(
                    "goal reached: the best version is at {:.0}% of the roofline floor (target {:.0}%)",
                    f * 100.0,
                    self.roofline_target * 100.0
                ));
            }
        }
        if !has_best {
            return None;
        }
        if s.rounds >= self.rounds {
            return Some(format!("{} optimization rounds done", s.rounds));
        }
        if self.patience > 0 && s.rounds_without_gain >= self.patience {
            return Some(format!(
                "{} optimization rounds in a row brought no gain",
                s.rounds_without_gain
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_working_stage_has_an_exit_and_the_table_is_a_function() {
        for (i, (s, o, _)) in TRANSITIONS.iter().enumerate() {
            for (s2, o2, _) in &TRANSITIONS[i + 1..] {
                assert!(!(s == s2 && o == o2), "duplicate transition {s:?} {o:?}");
            }
        }
        for s in [
            Stage::Generate,
            Stage::Compile,
            Stage::Validate,
            Stage::Debug,
            Stage::Optimize,
        ] {
            assert_eq!(next(s, Outcome::Stop), Some(Stage::Done));
        }
        assert_eq!(next(Stage::Validate, Outcome::Wrong), Some(Stage::Debug));
        assert_eq!(
            next(Stage::Debug, Outcome::DebugExhaustedWithBest),
            Some(Stage::Optimize)
        );
        assert_eq!(next(Stage::Done, Outcome::Proposed), None);
    }

    #[test]
    fn budgets_stop_the_loop() {
        let b = Budgets {
            tokens: 1000,
            rounds: 5,
            patience: 2,
            ..Budgets::default()
        };
        let mut s = Spent::default();
        assert!(b.exhausted(&s, true, Some(0.5)).is_none());
        s.prompt_tokens = 900;
        s.completion_tokens = 100;
        assert!(b
            .exhausted(&s, false, None)
            .unwrap()
            .contains("token budget"));
        s.prompt_tokens = 0;
        assert!(b
            .exhausted(&s, true, Some(0.96))
            .unwrap()
            .contains("goal reached"));
        s.rounds_without_gain = 2;
        assert!(
            b.exhausted(&s, false, None).is_none(),
            "no-gain applies only with a best"
        );
        assert!(b.exhausted(&s, true, None).unwrap().contains("no gain"));
    }
}
