//! Roofline placement: where a timed kernel sits against the machine's two ceilings (the
//! copy bandwidth measured in the same run, the tensor/FMA peak for the workload's
//! arithmetic), as numbers and as one sentence a prompt can carry.

use serde::{Deserialize, Serialize};

use crate::eval::job::{Ceilings, TimingReport};

/// Which ceiling bounds the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    Memory,
    Compute,
}

/// The placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// FLOPs per minimum byte.
    pub intensity: f64,
    /// Peak FLOP/s / copy bytes/s: the intensity where the roofs meet.
    pub ridge: f64,
    pub bound: Bound,
    pub achieved_tflops: f64,
    pub achieved_tb_per_s: f64,
    pub peak_tflops: f64,
    pub copy_tb_per_s: f64,
    pub floor_us: f64,
    pub time_us: f64,
    /// floor / time: 1 is on the roof.
    pub fraction: f64,
    /// 1 - fraction: what is left to gain.
    pub headroom: f64,
}

impl Placement {
    /// From a timing report (the candidate's median) and the ceilings of the same run.
    pub fn new(t: &TimingReport, c: &Ceilings) -> Option<Placement> {
        let time_us = t.candidate.as_ref()?.median_us;
        if time_us <= 0.0 || c.copy_bytes_per_s <= 0.0 || c.peak_flops_per_s <= 0.0 {
            return None;
        }
        let secs = time_us * 1e-6;
        let intensity = if t.min_bytes > 0.0 {
            t.flops / t.min_bytes
        } else {
            0.0
        };
        let ridge = c.peak_flops_per_s / c.copy_bytes_per_s;
        let floor_us = (t.min_bytes / c.copy_bytes_per_s).max(t.flops / c.peak_flops_per_s) * 1e6;
        let fraction = floor_us / time_us;
        Some(Placement {
            intensity,
            ridge,
            bound: if intensity >= ridge {
                Bound::Compute
            } else {
                Bound::Memory
            },
            achieved_tflops: t.flops / secs / 1e12,
            achieved_tb_per_s: t.min_bytes / secs / 1e12,
            peak_tflops: c.peak_flops_per_s / 1e12,
            copy_tb_per_s: c.copy_bytes_per_s / 1e12,
            floor_us,
            time_us,
            fraction,
            headroom: (1.0 - fraction).max(0.0),
        })
    }

    /// One sentence for a prompt or a terminal.
    pub fn sentence(&self) -> String {
        match self.bound {
            Bound::Compute => format!(
                "compute bound (intensity {:.0} FLOP/B >= ridge {:.0}): {:.0} of {:.0} TFLOP/s peak, \
                 {:.2} us against a floor of {:.2} us ({:.0}% of the roofline, {:.0}% headroom)",
                self.intensity,
                self.ridge,
                self.achieved_tflops,
                self.peak_tflops,
                self.time_us,
                self.floor_us,
                self.fraction * 100.0,
                self.headroom * 100.0
            ),
            Bound::Memory => format!(
                "memory bound (intensity {:.1} FLOP/B < ridge {:.0}): {:.2} of {:.2} TB/s copy bandwidth, \
                 {:.2} us against a floor of {:.2} us ({:.0}% of the roofline, {:.0}% headroom)",
                self.intensity,
                self.ridge,
                self.achieved_tb_per_s,
                self.copy_tb_per_s,
                self.time_us,
                self.floor_us,
                self.fraction * 100.0,
                self.headroom * 100.0
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::job::Stats;
    use crate::spec::Shape;

    fn timing(flops: f64, bytes: f64, us: f64) -> TimingReport {
        TimingReport {
            shape: Shape {
                m: 4096,
                n: 4096,
                k: 4096,
                batch: 1,
                dims: Default::default(),
            },
            flops,
            min_bytes: bytes,
            floor_s: 0.0,
            candidate: Stats::from_samples(&[us]),
            roofline_fraction: None,
            achieved_tflops: None,
            achieved_tb_per_s: None,
            baselines: vec![],
            retimed: None,
        }
    }

    #[test]
    fn gemm_is_compute_bound_and_agrees_with_its_tflops() {
        let c = Ceilings {
            copy_bytes_per_s: 3.0e12,
            peak_flops_per_s: 989e12,
            peak_note: String::new(),
        };
        // 4096^3 bf16: 137.4 GFLOP, 100.7 MB; 180 us = 763.6 TFLOP/s.
        let p = Placement::new(&timing(1.374e11, 1.007e8, 180.0), &c).unwrap();
        assert_eq!(p.bound, Bound::Compute);
        assert!(
            (p.achieved_tflops - 763.3).abs() < 1.0,
            "{}",
            p.achieved_tflops
        );
        assert!((p.fraction - 138.9 / 180.0).abs() < 0.01, "{}", p.fraction);
        assert!(p.sentence().contains("compute bound"));
        // An activation: 2^28 bf16 in and out = 1.07 GB at 3 TB/s = 358 us.
        let q = Placement::new(&timing(2.7e8, 1.0737e9, 400.0), &c).unwrap();
        assert_eq!(q.bound, Bound::Memory);
        assert!((q.fraction - 0.8947).abs() < 0.01, "{}", q.fraction);
        assert!(q.sentence().contains("of 3.00 TB/s"));
    }
}
