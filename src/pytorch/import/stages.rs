//! A Model that no one workload computes, split into stages: workloads run one after
//! another, each reading the Model's inputs and parameters and the outputs of the stages
//! before it (KernelBench level 2's `linear -> sigmoid -> linear -> logsumexp`, level 3's
//! MLPs). Each stage is mapped by [`map_graph`] like a whole Model, on a sub-graph where
//! the values it reads from earlier stages are inputs; so each is validated and timed as
//! its own workload, against its own fp64 reference.
//!
//! The graph's compute nodes are cut into runs, in graph order. Views (transposes,
//! reshapes) and nodes that read no input of Model (a weight's transpose, a mask built
//! from a buffer) belong to no stage: each stage that reads them takes a copy. A run is a
//! stage when exactly one of its values is read after it (its output) and its sub-graph
//! maps; of all splits, the one with the fewest stages that no built-in template computes,
//! then the fewest stages, then the longest first stages is taken.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{arg, classify, map_graph, Arg, Class, Graph, Node, Unmapped};
use crate::spec::WorkloadSpec;

/// One stage: its spec, the ops it recognized, the node whose value it computes, and the
/// values it reads from earlier stages (node name, stage index).
#[derive(Debug, Clone)]
pub struct Stage {
    pub spec: WorkloadSpec,
    pub ops: Vec<String>,
    pub output: String,
    pub reads: Vec<(String, usize)>,
}

/// Why no split maps: the first node no stage starting there covers, with the problems of
/// the shortest stage starting there; and how many stages map before it.
#[derive(Debug, Clone)]
pub struct NoSplit {
    pub mapped_before: usize,
    pub at: String,
    pub problems: Vec<Unmapped>,
}

/// Every node name an argument (or a list of them) reads.
pub(super) fn refs(v: &Value, out: &mut Vec<String>) {
    each_ref(v, &mut |x| out.push(x.to_string()));
}

/// Calls `f` with every node name argument `v` holds (through lists), borrowed from `v`.
pub(super) fn each_ref<'v>(v: &'v Value, f: &mut impl FnMut(&'v str)) {
    match v {
        Value::Array(a) => a.iter().for_each(|x| each_ref(x, f)),
        _ => {
            if let Arg::Node(x) = arg(v) {
                f(x);
            }
        }
    }
}

/// Every node name `n`'s arguments read.
pub(super) fn node_refs(n: &Node) -> Vec<String> {
    let mut out = Vec::new();
    n.args
        .iter()
        .chain(n.kwargs.values())
        .for_each(|v| refs(v, &mut out));
    out
}

struct Plan<'g> {
    graph: &'g Graph,
    index: HashMap<&'g str, usize>,
    /// Per node: the names it reads.
    reads: Vec<Vec<String>>,
    /// Per node: a call that belongs to no stage (a view, or one reading no input).
    shared: Vec<bool>,
    /// The compute nodes (node indices), in graph order.
    compute: Vec<usize>,
    /// The graph's output values.
    output_refs: Vec<String>,
}

impl<'g> Plan<'g> {
    fn new(graph: &'g Graph) -> Self {
        let index: HashMap<&str, usize> = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let reads: Vec<Vec<String>> = graph.nodes.iter().map(node_refs).collect();
        // Whether each node depends on an input of Model.
        let mut on_input = vec![false; graph.nodes.len()];
        for (i, n) in graph.nodes.iter().enumerate() {
            on_input[i] = if n.op == "placeholder" {
                n.kind.as_deref() == Some("user_input")
            } else {
                reads[i]
                    .iter()
                    .any(|r| index.get(r.as_str()).is_some_and(|&j| on_input[j]))
            };
        }
        let shared: Vec<bool> = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                n.op == "call_function"
                    && (!on_input[i]
                        || classify(n.target.as_deref().unwrap_or_default()) == Class::View)
            })
            .collect();
        let compute = graph
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| n.op == "call_function" && !shared[*i])
            .map(|(i, _)| i)
            .collect();
        let mut output_refs = Vec::new();
        graph.output.iter().for_each(|v| refs(v, &mut output_refs));
        Plan {
            graph,
            index,
            reads,
            shared,
            compute,
            output_refs,
        }
    }

    /// The compute node whose value `name` is (through views), if any.
    fn owner(&self, name: &str) -> Option<usize> {
        let mut i = *self.index.get(name)?;
        loop {
            let n = &self.graph.nodes[i];
            if n.op != "call_function" {
                return None;
            }
            if !self.shared[i] {
                return Some(i);
            }
            // A view of a computed value is that value; a node reading no input, nobody's.
            if classify(n.target.as_deref().unwrap_or_default()) != Class::View {
                return None;
            }
            i = *self.index.get(self.reads[i].first()?.as_str())?;
        }
    }

    /// The node index of the output of the stage of compute nodes `s..=e` (positions in
    /// `compute`): the one node of the run whose value is read after it. None when none or
    /// several are (or, for the last run, the Model's output is not its value).
    fn stage_output(&self, s: usize, e: usize) -> Option<usize> {
        let run: HashSet<usize> = self.compute[s..=e].iter().copied().collect();
        let mut out: HashSet<usize> = HashSet::new();
        for &j in &self.compute[e + 1..] {
            for r in &self.reads[j] {
                out.extend(self.owner(r).filter(|o| run.contains(o)));
            }
        }
        // Views and shared nodes read by later stages read through to their owners above;
        // the Model's output must be the last stage's.
        let mut model_out = HashSet::new();
        for r in &self.output_refs {
            model_out.extend(self.owner(r));
        }
        if e + 1 == self.compute.len() {
            if !model_out.iter().all(|o| run.contains(o)) || model_out.len() != 1 || !out.is_empty()
            {
                return None;
            }
            return model_out.into_iter().next();
        }
        if !model_out.iter().all(|o| !run.contains(o)) {
            return None;
        }
        let o = match out.len() {
            1 => out.into_iter().next()?,
            _ => return None,
        };
        // A stage writes its output row-major: a value torch holds in another layout (an
        // op of a permuted view keeps its strides) would be read wrongly by the views
        // after it, so no stage ends there.
        let meta = self.graph.nodes[o].val.as_ref()?;
        let elements: i64 = meta.shape.iter().product();
        let dense = meta
            .shape
            .iter()
            .zip(&meta.stride)
            .zip(super::composite::row_major(&meta.shape))
            .all(|((&d, &st), want)| d == 1 || st == want);
        (elements <= 1 || dense).then_some(o)
    }

    /// The sub-graph of run `s..=e` with output node `out`: its compute nodes, the shared
    /// nodes and placeholders they read, and each earlier stage's value it reads as an
    /// input of Model. Also returns those values' node names.
    fn sub_graph(&self, s: usize, e: usize, out: usize) -> (Graph, Vec<String>) {
        let run: HashSet<usize> = self.compute[s..=e].iter().copied().collect();
        let last = e + 1 == self.compute.len();
        let mut keep: HashSet<usize> = HashSet::new();
        let mut boundary: HashSet<usize> = HashSet::new();
        let mut stack: Vec<usize> = run.iter().copied().collect();
        let mut roots: Vec<String> = Vec::new();
        if last {
            roots.extend(self.output_refs.iter().cloned());
        }
        stack.extend(
            roots
                .iter()
                .filter_map(|r| self.index.get(r.as_str()).copied()),
        );
        while let Some(i) = stack.pop() {
            let n = &self.graph.nodes[i];
            let computed_elsewhere =
                n.op == "call_function" && !self.shared[i] && !run.contains(&i);
            if computed_elsewhere {
                boundary.insert(i);
                continue;
            }
            if !keep.insert(i) {
                continue;
            }
            for r in &self.reads[i] {
                if let Some(&j) = self.index.get(r.as_str()) {
                    stack.push(j);
                }
            }
        }
        let mut nodes = Vec::new();
        let mut inputs = Vec::new();
        for (i, n) in self.graph.nodes.iter().enumerate() {
            if boundary.contains(&i) {
                inputs.push(n.name.clone());
                nodes.push(Node {
                    name: n.name.clone(),
                    op: "placeholder".into(),
                    target: None,
                    kind: Some("user_input".into()),
                    args: Vec::new(),
                    kwargs: Default::default(),
                    val: n.val.clone(),
                    value: None,
                    triangle: None,
                });
            } else if keep.contains(&i) {
                nodes.push(n.clone());
            }
        }
        let output = if last {
            self.graph.output.clone()
        } else {
            vec![serde_json::json!({ "node": self.graph.nodes[out].name })]
        };
        (
            Graph {
                torch: self.graph.torch.clone(),
                nodes,
                output,
            },
            inputs,
        )
    }
}

/// Splits `graph` into stages that map (see the module's comment). `builtin` says whether
/// a built-in template computes a stage's spec; `file` names the problem file.
pub fn split(
    graph: &Graph,
    file: &str,
    builtin: &dyn Fn(&WorkloadSpec) -> bool,
) -> Result<Vec<Stage>, NoSplit> {
    let plan = Plan::new(graph);
    let n = plan.compute.len();
    if n < 2 {
        return Err(NoSplit {
            mapped_before: 0,
            at: plan
                .compute
                .first()
                .map(|&i| graph.nodes[i].name.clone())
                .unwrap_or_else(|| "output".into()),
            problems: Vec::new(),
        });
    }
    // Every run that maps: (s, e) -> (spec, ops, output node, inputs), with its problems
    // kept for the shortest run from each s.
    type Mapped = (WorkloadSpec, Vec<String>, usize, Vec<String>);
    let mut runs: HashMap<(usize, usize), Mapped> = HashMap::new();
    let mut first_problems: HashMap<usize, Vec<Unmapped>> = HashMap::new();
    // Ops no family computes (a convolution, a pooling): no run through one maps, so the
    // runs from each start stop there (a model's worth of them would cost minutes).
    let never: Vec<bool> = plan
        .compute
        .iter()
        .map(|&i| {
            let op = super::op_name(graph.nodes[i].target.as_deref().unwrap_or_default());
            op.starts_with("conv") || op.contains("pool")
        })
        .collect();
    for s in 0..n {
        // The first op no family computes after s (runs from s end before it).
        let end = (s + 1..n).find(|&e| never[e]).unwrap_or(n);
        for e in s..end {
            // The whole graph was tried before this.
            if s == 0 && e + 1 == n {
                continue;
            }
            let Some(out) = plan.stage_output(s, e) else {
                continue;
            };
            let (g, inputs) = plan.sub_graph(s, e, out);
            let count = n.to_string().len();
            let label = format!("{file}, ops {:0count$}-{:0count$}", s + 1, e + 1);
            match map_graph(&g, &label) {
                Ok((spec, ops)) => {
                    runs.insert((s, e), (spec, ops, out, inputs));
                }
                Err(p) => {
                    first_problems.entry(s).or_insert(p);
                }
            }
        }
    }
    // Whether a built-in template computes each mapped run (runs of one spec asked once).
    let mut has_builtin: HashMap<(usize, usize), bool> = HashMap::new();
    let mut asked: HashMap<String, bool> = HashMap::new();
    for (key, run) in &runs {
        let text = run.0.to_toml().unwrap_or_default();
        let yes = *asked.entry(text).or_insert_with(|| builtin(&run.0));
        has_builtin.insert(*key, yes);
    }
    // best[s]: (stages with no built-in template, stages, first stage's end) from s on.
    let mut best: Vec<Option<(usize, usize, usize)>> = vec![None; n + 1];
    best[n] = Some((0, 0, n));
    for s in (0..n).rev() {
        for e in (s..n).rev() {
            let (Some(&yes), Some((nb, ns, _))) = (has_builtin.get(&(s, e)), best[e + 1]) else {
                continue;
            };
            let cost = (nb + usize::from(!yes), ns + 1, e);
            if best[s].is_none_or(|b| (cost.0, cost.1) < (b.0, b.1)) {
                best[s] = Some(cost);
            }
        }
    }
    if best[0].is_none() {
        // The furthest start a chain of mapped runs reaches.
        let mut reach = vec![false; n + 1];
        reach[0] = true;
        let mut stages_to = vec![0usize; n + 1];
        for s in 0..n {
            if !reach[s] {
                continue;
            }
            for e in s..n {
                if runs.contains_key(&(s, e)) && !reach[e + 1] {
                    reach[e + 1] = true;
                    stages_to[e + 1] = stages_to[s] + 1;
                }
            }
        }
        let far = (0..n).rev().find(|&s| reach[s]).unwrap_or(0);
        let at = graph.nodes[plan.compute[far]].name.clone();
        // No run from there was even tried: none has one value read after it alone.
        let problems = first_problems.remove(&far).unwrap_or_else(|| {
            vec![Unmapped {
                node: at.clone(),
                target: graph.nodes[plan.compute[far]]
                    .target
                    .clone()
                    .unwrap_or_default(),
                message: "no run of ops from here ends in one value that the ops after it \
                          read (several values of it are read later, or one torch holds in \
                          a layout other than row-major)"
                    .into(),
            }]
        });
        return Err(NoSplit {
            mapped_before: stages_to[far],
            at,
            problems,
        });
    }
    let mut stages: Vec<Stage> = Vec::new();
    let mut owner_stage: HashMap<String, usize> = HashMap::new();
    let mut s = 0;
    let total = {
        let mut k = 0;
        let mut t = 0;
        while t < n {
            t = best[t].map_or(n, |b| b.2 + 1);
            k += 1;
        }
        k
    };
    while s < n {
        let Some((_, _, e)) = best[s] else { break };
        let Some((spec, ops, out, inputs)) = runs.remove(&(s, e)) else {
            break;
        };
        let k = stages.len();
        let reads = inputs
            .iter()
            .filter_map(|i| owner_stage.get(i).map(|&st| (i.clone(), st)))
            .collect();
        let name = graph.nodes[out].name.clone();
        owner_stage.insert(name.clone(), k);
        let mut spec = spec;
        spec.description = relabel(&spec.description, file, k + 1, total);
        stages.push(Stage {
            spec,
            ops,
            output: name,
            reads,
        });
        s = e + 1;
    }
    Ok(stages)
}

/// A stage's description: "imported from FILE, ops 3-5" becomes "stage 2 of 3 of FILE".
fn relabel(description: &str, file: &str, k: usize, total: usize) -> String {
    match description.find(&format!("imported from {file}, ops ")) {
        Some(at) => format!("{}stage {k} of {total} of {file}", &description[..at]),
        None => format!("{description} (stage {k} of {total} of {file})"),
    }
}
