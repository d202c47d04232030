//! The one-line listing of a workload (`cutesmith workloads`).

use super::schema::Family;
use super::Workload;

impl Workload {
    /// The type column of the listing: `bf16`, `bf16->f32`, `f32 tf32`, plus the BLAS
    /// layout (`TN`) or the activation.
    fn kind_label(&self) -> String {
        let mut s = self.dtype.name().to_string();
        if self.out_dtype != self.dtype {
            s.push_str("->");
            s.push_str(self.out_dtype.name());
        }
        if self.allow_tf32 {
            s.push_str(" tf32");
        }
        let extra_ops = match self.family {
            Family::GemmBiasAct => self.chain.steps.len() - 1 - usize::from(self.params.bias),
            Family::Activation => self.chain.steps.len().saturating_sub(1),
            _ => self.chain.steps.len(),
        };
        let chain = if extra_ops > 0 {
            format!(" +{extra_ops} ops")
        } else {
            String::new()
        };
        match self.family {
            Family::Gemm => format!("{s} {}{chain}", self.layouts.blas_name()),
            Family::GemmBiasAct => format!(
                "{s} {} {}{}{chain}",
                self.layouts.blas_name(),
                if self.params.bias { "bias+" } else { "" },
                self.params.activation
            ),
            Family::GemmSoftmax => format!(
                "{s} {}{chain} {}",
                self.layouts.blas_name(),
                if self.params.log_softmax {
                    "log_softmax"
                } else {
                    "softmax"
                }
            ),
            Family::GemmGlu => format!("{s} {} {}-glu", self.layouts.blas_name(), self.params.gate),
            Family::GemmReduce => format!(
                "{s} {}{chain} {}{}",
                self.layouts.blas_name(),
                self.params.reduce,
                if self.after.steps.is_empty() {
                    String::new()
                } else {
                    format!(" +{} after", self.after.steps.len())
                }
            ),
            Family::GemmNorm => format!(
                "{s} {}{} {}{}{chain}",
                self.layouts.blas_name(),
                if self.before.steps.is_empty() {
                    String::new()
                } else {
                    format!(" {} ops then", self.before.steps.len())
                },
                self.params.norm,
                if self.params.groups > 1 {
                    format!(" in {} groups", self.params.groups)
                } else {
                    String::new()
                }
            ),
            Family::Activation => {
                // The chain's first op is the activation (written as `activation =` or as
                // the first `[[epilogue]]` op).
                let act = match self.chain.steps.first().map(|st| &st.op) {
                    Some(super::chain::Op::Act(a, _, _)) => a.name().to_string(),
                    Some(_) => "chain".to_string(),
                    None => self.params.activation.to_string(),
                };
                let view = if self.view.is_some() {
                    " of a view"
                } else {
                    ""
                };
                format!("{s} {act}{chain}{view}")
            }
            // The ops before the softmax (its chain, written [[before]]).
            Family::Softmax | Family::LogSoftmax => match self.chain.steps.len() {
                0 => s,
                k => format!("{s} {k} ops before"),
            },
            Family::Norm => format!(
                "{s} {}{}{chain}",
                self.params.norm,
                if self.layouts.a == super::schema::Layout::Col {
                    " col"
                } else {
                    ""
                }
            ),
            Family::Scan => format!(
                "{s} {}cum{}{}{}{}{chain}",
                match self.before.steps.len() {
                    0 => String::new(),
                    b => format!("{b} ops then "),
                },
                self.params.scan,
                if self.params.reverse { " reverse" } else { "" },
                if self.params.exclusive {
                    " exclusive"
                } else {
                    ""
                },
                if self.layouts.a == super::schema::Layout::Col {
                    " col"
                } else {
                    ""
                }
            ),
            Family::Reduce => format!(
                "{s} {}{}{}{chain}",
                match self.before.steps.len() {
                    0 => String::new(),
                    b => format!("{b} ops then "),
                },
                self.params.reduce,
                if self.layouts.a == super::schema::Layout::Col {
                    " col"
                } else if self.params.total != super::schema::TotalKind::None {
                    match self.params.total {
                        super::schema::TotalKind::Sum => " sum",
                        _ => " mean",
                    }
                } else {
                    ""
                }
            ),
        }
    }

    /// The column titles matching [`Workload::summary_line`].
    pub fn summary_header() -> String {
        format!(
            "{:<28} {:<13} {:<22} {:<20} {:>6} {:>12} {:>10}",
            "NAME", "FAMILY", "TYPE", "HEADLINE", "SHAPES", "FLOP", "MIN BYTES"
        )
    }

    /// One line for `cutesmith workloads`: name, family, types, headline shape, number
    /// of shapes, FLOPs and minimum bytes of the headline.
    pub fn summary_line(&self) -> String {
        let h = self.headline();
        format!(
            "{:<28} {:<13} {:<22} {:<20} {:>6} {:>12} {:>10}",
            self.name,
            self.family,
            self.kind_label(),
            h.to_string(),
            self.shapes.len(),
            si(self.flops(h), "FLOP"),
            si(self.min_bytes(h), "B"),
        )
    }
}

/// A number with an SI prefix and unit, four significant digits: `137.4 GFLOP`.
pub(super) fn si(x: f64, unit: &str) -> String {
    const PREFIXES: [(f64, &str); 5] =
        [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, p) in PREFIXES {
        if x >= scale {
            let v = x / scale;
            let digits = if v >= 100.0 {
                1
            } else if v >= 10.0 {
                2
            } else {
                3
            };
            return format!("{v:.digits$} {p}{unit}");
        }
    }
    format!("{x} {unit}")
}
