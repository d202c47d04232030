//! A workload's goal, in words, and whether a measured time meets it.

use super::schema::Family;
use super::Workload;

impl Workload {
    /// The goal in words and whether it was met by a best time of `best_us` against
    /// `baselines` (name, median us, speedup of the candidate over it): GEMMs against the
    /// spec's speedup target over its baseline; memory-bound ops against 90% (softmax 80%)
    /// of the copy; and, when the spec sets `target.min_roofline_fraction`, that fraction
    /// of the roofline floor too (`roofline` is the best time's fraction).
    pub fn goal(
        &self,
        best_us: Option<f64>,
        baselines: &[(String, f64, Option<f64>)],
        roofline: Option<f64>,
    ) -> (String, bool) {
        if best_us.is_none() {
            return ("no correct candidate".into(), false);
        }
        let (words, met) = self.speed_goal(baselines);
        match self.target().min_roofline_fraction {
            Some(f) => (
                format!("{words} and {:.0}% of the roofline", f * 100.0),
                met && roofline.is_some_and(|r| r >= f),
            ),
            None => (words, met),
        }
    }

    /// The baseline the speed goal is measured against: the target's `speedup_vs` for the
    /// GEMM families, the device copy for the memory-bound ones.
    pub fn goal_baseline(&self) -> &'static str {
        match self.family() {
            Family::Gemm
            | Family::GemmBiasAct
            | Family::GemmSoftmax
            | Family::GemmGlu
            | Family::GemmReduce
            | Family::GemmNorm => self.target().speedup_vs.name(),
            Family::Activation
            | Family::Softmax
            | Family::LogSoftmax
            | Family::Norm
            | Family::Reduce
            | Family::Scan => "copy",
        }
    }

    /// The row of `baselines` the goal is judged against (`goal_baseline`), if it ran.
    fn goal_row<'a>(
        &self,
        baselines: &'a [(String, f64, Option<f64>)],
    ) -> Option<&'a (String, f64, Option<f64>)> {
        let name = self.goal_baseline();
        baselines
            .iter()
            // The labelled TF32 reference row beside an fp32 workload also starts with
            // "cublas"; it is never the goal's baseline.
            .find(|b| b.0.starts_with(name) && b.0 != super::TF32_REFERENCE)
    }

    /// Whether a goal can be judged: false where a correct kernel was timed but the
    /// library its goal is measured against did not run beside it (cuBLASLt has no
    /// e5m2 x e5m2 GEMM, or refused the problem). `goal` then says so in words and does not
    /// count the row as met.
    pub fn goal_judged(
        &self,
        best_us: Option<f64>,
        baselines: &[(String, f64, Option<f64>)],
    ) -> bool {
        best_us.is_none() || !self.family().is_gemm() || self.goal_row(baselines).is_some()
    }

    fn speed_goal(&self, baselines: &[(String, f64, Option<f64>)]) -> (String, bool) {
        let speedup = || self.goal_row(baselines).and_then(|b| b.2);
        match self.family() {
            Family::Gemm
            | Family::GemmBiasAct
            | Family::GemmSoftmax
            | Family::GemmGlu
            | Family::GemmReduce
            | Family::GemmNorm => {
                let t = self.target();
                let want = t.min_speedup;
                let vs = self.goal_baseline();
                // No library ran beside the candidate (cuBLASLt has no e5m2 x e5m2 GEMM, or
                // the library refused the problem): the goal cannot be judged, and says so.
                if self.goal_row(baselines).is_none() {
                    return (
                        format!("{want:.2}x {vs}: no {vs} ran beside it, not judged"),
                        false,
                    );
                }
                (
                    format!("{want:.2}x {vs}"),
                    speedup().is_some_and(|g| g >= want),
                )
            }
            Family::Activation
            | Family::Softmax
            | Family::LogSoftmax
            | Family::Norm
            | Family::Reduce
            | Family::Scan => {
                // A row op (softmax, a norm) reduces each row before it writes: 80%. A
                // reduction streams its input once and writes almost nothing, and a scan
                // reads and writes each element once in a single pass (its carry moves along
                // the row): 90%.
                let want = if matches!(
                    self.family(),
                    Family::Activation | Family::Reduce | Family::Scan
                ) {
                    0.9
                } else {
                    0.8
                };
                (
                    format!("{:.0}% of copy", want * 100.0),
                    speedup().is_some_and(|g| g >= want),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::spec::Workload;

    fn workloads_dir() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/workloads"))
    }

    #[test]
    fn goals_follow_the_family() {
        let dir = workloads_dir();
        let gemm = Workload::find(&dir, "gemm_bf16_4096").unwrap();
        let b = vec![("cublas".to_string(), 100.0, Some(1.05))];
        assert_eq!(
            gemm.goal(Some(95.0), &b, None),
            ("1.00x cublas".to_string(), true)
        );
        assert_eq!(gemm.goal_baseline(), "cublas");
        let slow = vec![("cublas".to_string(), 100.0, Some(0.98))];
        assert!(!gemm.goal(Some(102.0), &slow, None).1);
        // No library beside the candidate (e5m2 x e5m2): not met, and the goal says why.
        let (words, met) = gemm.goal(Some(17.4), &[], None);
        assert!(!met);
        assert_eq!(words, "1.00x cublas: no cublas ran beside it, not judged");
        // ... and the row is not judged (neither met nor missed); with the library beside
        // it, or without a correct kernel at all, it is.
        assert!(!gemm.goal_judged(Some(17.4), &[]));
        assert!(gemm.goal_judged(Some(102.0), &slow));
        assert!(gemm.goal_judged(None, &[]));
        // fp8's goal is met against cuBLASLt, the library that runs it.
        let lt = vec![(
            "cublaslt (best of 8 heuristic algorithms)".to_string(),
            54.1,
            Some(1.12),
        )];
        assert_eq!(
            gemm.goal(Some(48.4), &lt, None),
            ("1.00x cublas".to_string(), true)
        );
        let sm = Workload::find(&dir, "softmax_bf16_4096x65536").unwrap();
        assert_eq!(sm.goal_baseline(), "copy");
        let copy = vec![("copy".to_string(), 100.0, Some(0.85))];
        assert_eq!(
            sm.goal(Some(118.0), &copy, None),
            ("80% of copy".to_string(), true)
        );
        let act = Workload::find(&dir, "act_relu_bf16").unwrap();
        assert!(
            !act.goal(Some(118.0), &copy, None).1,
            "activations need 90%"
        );
        assert!(!act.goal(None, &copy, None).1);
        // target.min_roofline_fraction is a second condition.
        let roof = Workload::parse(
            "workloads/r.toml",
            "description = \"r\"\nfamily = \"gemm\"\ndtype = \"bf16\"\n[[shapes]]\nm = 64\nn = 64\nk = 64\n[target]\nmin_roofline_fraction = 0.8\n",
        )
        .unwrap();
        let fast = vec![("cublas".to_string(), 100.0, Some(1.5))];
        assert_eq!(
            roof.goal(Some(50.0), &fast, Some(0.7)),
            ("1.00x cublas and 80% of the roofline".to_string(), false)
        );
        assert!(roof.goal(Some(50.0), &fast, Some(0.85)).1);
    }
}
