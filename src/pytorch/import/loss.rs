//! The cross-entropy loss of rows of logits against int64 class targets
//! (`F.cross_entropy`, `nn.CrossEntropyLoss`, or `F.nll_loss` of a `log_softmax` over the
//! last dim): the reduce family's `cross_entropy`. The logits are a Model input (through
//! reshapes that only merge its leading dims: an LLM's `logits.view(-1, V)`), the targets
//! another (an int64 input of one class a row, reshaped alike).

use std::collections::HashSet;

use serde_json::Value;

use super::{arg, op_name, Arg, Mapper, Node};
use crate::spec::{Family, ParamsSpec, ReduceKind, ShapeSpec, TotalKind, WorkloadSpec};

/// A cross entropy found in the graph: the loss node, its logits' and targets' Model
/// inputs, torch's `reduction` and `ignore_index`, and the nodes it absorbs.
pub(super) struct CrossEntropyMatch {
    pub head: String,
    pub logits: String,
    pub rows: i64,
    pub classes: i64,
    pub total: TotalKind,
    pub ignore_index: i64,
    pub absorbed: HashSet<String>,
}

/// An argument by position, else by name.
fn arg_at<'n>(n: &'n Node, i: usize, name: &str) -> Option<&'n Value> {
    n.args
        .get(i)
        .or_else(|| n.kwargs.get(name))
        .filter(|v| !v.is_null())
}

impl<'g> Mapper<'g> {
    /// Every cross entropy of the graph (a `cross_entropy_loss` node, or an `nll_loss` of a
    /// log-softmax over the last dim); refusals are recorded as problems.
    pub(super) fn cross_entropies(&mut self, calls: &[&'g Node]) -> Vec<CrossEntropyMatch> {
        let mut found = Vec::new();
        for &n in calls {
            let t = n.target.as_deref().unwrap_or_default();
            let op = op_name(t);
            // (nll_loss_forward, which returns a pair, is left to the unknown-op message.)
            let nll = matches!(op, "nll_loss" | "nll_loss_nd");
            if op != "cross_entropy_loss" && !nll {
                continue;
            }
            if let Some(m) = self.cross_entropy(n, nll) {
                found.push(m);
            }
        }
        found
    }

    fn cross_entropy(&mut self, n: &'g Node, nll: bool) -> Option<CrossEntropyMatch> {
        let mut absorbed = HashSet::from([n.name.clone()]);
        if arg_at(n, 2, "weight").is_some() {
            self.problem(
                n,
                "a class weight: a cross entropy here weighs every class alike (weight=None)",
            );
            return None;
        }
        if !nll {
            let smoothing = arg_at(n, 5, "label_smoothing").and_then(Value::as_f64);
            if smoothing.is_some_and(|s| s != 0.0) {
                self.problem(
                    n,
                    "label_smoothing: a cross entropy here takes the target's logit alone \
                     (label_smoothing = 0)",
                );
                return None;
            }
        }
        let total = match arg_at(n, 3, "reduction").and_then(Value::as_i64) {
            None | Some(1) => TotalKind::Mean,
            Some(0) => TotalKind::None,
            Some(2) => TotalKind::Sum,
            Some(r) => {
                self.problem(
                    n,
                    format!("reduction {r}: not none (0), mean (1) or sum (2)"),
                );
                return None;
            }
        };
        let ignore_index = arg_at(n, 4, "ignore_index")
            .and_then(Value::as_i64)
            .unwrap_or(-100);
        let (Some(Arg::Node(input)), Some(Arg::Node(target))) =
            (n.args.first().map(arg), n.args.get(1).map(arg))
        else {
            self.problem(n, "its input and target are not tensors");
            return None;
        };
        // nll_loss reads log-probabilities: a log_softmax over the last dim of the logits.
        let logits_value = if nll {
            let lsm = self.nodes.get(input).copied().filter(|m| {
                matches!(
                    op_name(m.target.as_deref().unwrap_or_default()),
                    "log_softmax" | "_log_softmax"
                )
            });
            let Some(lsm) = lsm else {
                self.problem(
                    n,
                    "an nll_loss of something other than a log_softmax: the cross entropy \
                     maps F.nll_loss(F.log_softmax(x, dim=-1), t)",
                );
                return None;
            };
            let rank = self.meta(&lsm.name).map_or(0, |m| m.shape.len() as i64);
            let dim = lsm.args.get(1).and_then(Value::as_i64).unwrap_or(-1);
            if rank == 0 || (dim != -1 && dim != rank - 1) {
                self.problem(
                    lsm,
                    "a log_softmax over a dim other than the last before nll_loss: the classes \
                     must be each row's contiguous last dim",
                );
                return None;
            }
            absorbed.insert(lsm.name.clone());
            match lsm.args.first().map(arg) {
                Some(Arg::Node(x)) => x,
                _ => {
                    self.problem(lsm, "its input is not a tensor");
                    return None;
                }
            }
        } else {
            input
        };
        let Some(meta) = self.meta(logits_value).cloned() else {
            self.problem(n, "its logits have no tensor metadata");
            return None;
        };
        if meta.shape.len() != 2 {
            self.problem(
                n,
                format!(
                    "logits of shape {:?}: a cross entropy here takes (N, C) rows of logits \
                     (flatten an (N, C, d1, ...) input's class dim last first)",
                    meta.shape
                ),
            );
            return None;
        }
        let (rows, classes) = (meta.shape[0], meta.shape[1]);
        let Some(logits) = self.flattened_input(logits_value, classes, &mut absorbed) else {
            self.problem(
                n,
                "its logits are computed, or reach a Model input through more than reshapes \
                 of its leading dims: the cross entropy reads an input's rows as they are",
            );
            return None;
        };
        match self.meta(target) {
            Some(m) if m.dtype == "int64" && m.shape == [rows] => {}
            Some(m) if m.dtype != "int64" => {
                self.problem(
                    n,
                    format!(
                        "targets of type {} (class probabilities): a cross entropy here takes \
                         int64 class indices",
                        m.dtype
                    ),
                );
                return None;
            }
            _ => {
                self.problem(
                    n,
                    format!("targets not of shape [{rows}] (one class a row)"),
                );
                return None;
            }
        }
        if self.flattened_input(target, 1, &mut absorbed).is_none() {
            self.problem(
                n,
                "its targets are computed: the cross entropy reads a Model input's classes",
            );
            return None;
        }
        Some(CrossEntropyMatch {
            head: n.name.clone(),
            logits,
            rows,
            classes,
            total,
            ignore_index,
            absorbed,
        })
    }

    /// The Model input `name` is, through reshapes that keep its last `inner` elements a
    /// row (merging leading dims only) and copies; those nodes join `absorbed`.
    fn flattened_input(
        &self,
        name: &str,
        inner: i64,
        absorbed: &mut HashSet<String>,
    ) -> Option<String> {
        let mut cur = *self.nodes.get(name)?;
        let mut seen = Vec::new();
        loop {
            if cur.op == "placeholder" {
                let m = cur.val.as_ref()?;
                // Row-major and contiguous, its last dim the row (a 1-D target: any).
                let mut want = 1;
                for (d, s) in m.shape.iter().zip(&m.stride).rev() {
                    if *d > 1 && *s != want {
                        return None;
                    }
                    want *= d;
                }
                if inner > 1 && m.shape.last() != Some(&inner) {
                    return None;
                }
                absorbed.extend(seen);
                return Some(cur.name.clone());
            }
            let t = cur.target.as_deref().unwrap_or_default();
            if !matches!(
                op_name(t),
                "view" | "reshape" | "_unsafe_view" | "flatten" | "contiguous" | "clone" | "alias"
            ) {
                return None;
            }
            seen.push(cur.name.clone());
            let Some(Arg::Node(prev)) = cur.args.first().map(arg) else {
                return None;
            };
            cur = *self.nodes.get(prev)?;
        }
    }
}

/// The spec of a cross entropy that is the whole Model (its output, or cast at it).
pub(super) fn map_cross_entropy(
    mp: &mut Mapper<'_>,
    ce: &CrossEntropyMatch,
    out: &str,
    file: &str,
    ops: &mut Vec<String>,
) -> Option<WorkloadSpec> {
    let head = mp.node(&ce.head)?;
    if ce.head != out {
        mp.problem(
            head,
            "ops after a cross entropy: the workload's output is the loss itself",
        );
        return None;
    }
    let dtype = mp
        .meta(&ce.logits)
        .and_then(|m| super::dtype_of(&m.dtype))
        .filter(|d| !d.is_fp8());
    let Some(dtype) = dtype else {
        mp.problem(head, "logits of a type other than f32, f16 or bf16");
        return None;
    };
    ops.push(format!(
        "cross_entropy of {} rows of {} logits ({}, ignore_index {})",
        ce.rows,
        ce.classes,
        ce.total.name(),
        ce.ignore_index
    ));
    let mut shapes = vec![
        ShapeSpec {
            m: Some(ce.rows),
            k: Some(ce.classes),
            ..Default::default()
        },
        ShapeSpec {
            m: Some(super::ragged(ce.rows)),
            k: Some(super::ragged(ce.classes)),
            ..Default::default()
        },
        // With a total, each output of the small shape is 3 rows' losses (a batch of 64),
        // where a wrong row shows; without, 33 rows.
        if ce.total == TotalKind::None {
            ShapeSpec {
                m: Some(super::small(ce.rows, 33)),
                k: Some(super::small(ce.classes, 1023)),
                ..Default::default()
            }
        } else {
            ShapeSpec {
                batch: Some(64),
                m: Some(3),
                k: Some(super::small(ce.classes, 1023)),
                ..Default::default()
            }
        },
    ];
    super::dedup(&mut shapes);
    let name = std::path::Path::new(file)
        .file_name()
        .map_or_else(|| file.to_string(), |f| f.to_string_lossy().into_owned());
    Some(WorkloadSpec {
        name: None,
        description: format!(
            "{dtype} cross entropy of {} rows of {} logits against int64 targets ({} over the \
             rows, ignore_index {}); imported from {name}",
            ce.rows,
            ce.classes,
            ce.total.name(),
            ce.ignore_index
        ),
        family: Family::Reduce,
        dtype,
        out_dtype: None,
        acc_dtype: None,
        allow_tf32: false,
        layout: None,
        shapes,
        params: ParamsSpec {
            reduce: Some(ReduceKind::CrossEntropy),
            total: Some(ce.total),
            ignore_index: (ce.ignore_index != -100).then_some(ce.ignore_index),
            ..ParamsSpec::default()
        },
        tolerance: None,
        target: None,
        view: None,
        epilogue: Vec::new(),
        after: Vec::new(),
        before: Vec::new(),
    })
}
