//! The cross-field rules: a parsed [`WorkloadSpec`] becomes a [`Workload`] only when
//! every rule holds (dimensions per family, parameters that belong to the family,
//! dtypes, tolerances, targets), with defaults filled; every error names the file, the
//! field and its line.

use std::collections::BTreeSet;
use std::path::Path;

use super::chain::{BinOp, Chain, Op, OpSpec, Operand, TensorKind, MAX_DIMS, MAX_TENSORS};
use super::error::{Result, WorkloadError};
use super::location::line_of;
use super::schema::*;
use super::tolerance::Tolerance;
use super::view::{View, ViewSpec};
use super::Workload;

// ---------------------------------------------------------------------------------
// Semantic validation.

/// Turns a [`WorkloadSpec`] into a [`Workload`], naming the file in every error.
pub(super) struct Validator<'a> {
    pub(super) path: &'a Path,
    /// The spec text, when known, to give errors a line number.
    pub(super) text: Option<&'a str>,
}

/// The longest row an index reduction takes (its indices stay exact in f32).
const MAX_INDEX_K: u64 = 1 << 24;
/// Rows a batch of a total's checking shape: each output a total of this many losses at most.
const MAX_TOTAL_CHECK_ROWS: u64 = 4;

/// The type of a chain's tensor operands (a bias, a residual) unless an op names one: D's,
/// bf16 beside an fp8 D (as cuBLASLt's fp8 epilogue takes its bias).
fn chain_dtype(out_dtype: DType) -> DType {
    if out_dtype.is_fp8() {
        DType::BF16
    } else {
        out_dtype
    }
}

/// The most device memory any workload shape may need (1 TiB: beyond every GPU).
pub const MAX_DEVICE_BYTES: f64 = 1_099_511_627_776.0;

/// Bytes for people: "35.2 TB", "1.10 TB", "512 MB" (decimal units).
pub fn human_bytes(b: f64) -> String {
    let units = [(1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")];
    for (scale, name) in units {
        if b >= scale {
            let v = b / scale;
            return if v >= 10.0 {
                format!("{v:.1} {name}")
            } else {
                format!("{v:.2} {name}")
            };
        }
    }
    format!("{b:.0} B")
}

impl Validator<'_> {
    fn err(&self, field: impl Into<String>, message: impl Into<String>) -> WorkloadError {
        let field = field.into();
        WorkloadError::Invalid {
            path: self.path.to_path_buf(),
            line: self.text.and_then(|t| line_of(t, &field)),
            field,
            message: message.into(),
        }
    }

    pub(super) fn run(&self, spec: WorkloadSpec) -> Result<Workload> {
        let name = self.name(spec.name.as_deref())?;
        let family = spec.family;

        let description = spec.description.trim().to_string();
        if description.is_empty() || description.contains('\n') {
            return Err(self.err(
                "description",
                "must be one non-empty line saying what the workload is",
            ));
        }

        let (out_dtype, acc_dtype) = self.dtypes(&spec)?;

        let layouts = match (family.is_gemm(), spec.layout) {
            (false, Some(l)) if matches!(family, Family::Norm | Family::Scan) => {
                self.norm_layouts(family, &l)?
            }
            (false, Some(l)) if family == Family::Reduce => self.reduce_layouts(&l)?,
            (true, l) => {
                let l = l.unwrap_or_default();
                let d = Layouts::default();
                let shared = l.shared.clone().unwrap_or_default();
                Layouts {
                    a: l.a.unwrap_or(d.a),
                    b: l.b.unwrap_or(d.b),
                    c: l.c.unwrap_or(d.c),
                    shared_a: shared.contains(&SharedOperand::A),
                    shared_b: shared.contains(&SharedOperand::B),
                }
            }
            (false, None) => Layouts {
                a: Layout::Row,
                b: Layout::Row,
                c: Layout::Row,
                shared_a: false,
                shared_b: false,
            },
            (false, Some(_)) => {
                return Err(self.err(
                    "layout",
                    format!(
                        "only for the GEMM families (gemm, gemm_bias_act, gemm_softmax, \
                         gemm_glu), norm, reduce and scan, not {family}; remove [layout]"
                    ),
                ))
            }
        };

        if family == Family::GemmReduce && (layouts.c == Layout::Col) {
            return Err(self.err(
                "layout.c",
                "family gemm_reduce writes D as m x 1 (one value a row): leave c out or set \"row\"",
            ));
        }
        if family == Family::GemmNorm && (layouts.c == Layout::Col) {
            return Err(self.err(
                "layout.c",
                "family gemm_norm normalizes the rows of a row-major D: leave c out or set \"row\"",
            ));
        }
        let mut shapes = self.shapes(family, &spec.shapes)?;
        let params = self.params(family, spec.dtype, out_dtype, &spec.params)?;
        if family == Family::GemmNorm {
            let g = u64::from(params.groups);
            if let Some((i, sh)) = shapes.iter().enumerate().find(|(_, sh)| sh.n % g != 0) {
                return Err(self.err(
                    format!("shapes[{i}].n"),
                    format!(
                        "{} does not split into params.groups = {g} groups of equal length",
                        sh.n
                    ),
                ));
            }
        }
        if params.total != TotalKind::None {
            // One value of many rows' losses hides a wrong row inside the output type's
            // tolerance (a bf16 mean of 1000 rows moved by a wrong class in every row still
            // passed): a shape of a few rows a batch checks the rows themselves.
            if !shapes.iter().any(|sh| sh.m <= MAX_TOTAL_CHECK_ROWS) {
                return Err(self.err(
                    "shapes",
                    format!(
                        "a total (params.total = \"{}\") needs a shape of at most \
                         {MAX_TOTAL_CHECK_ROWS} rows a batch, where each output is a few rows' \
                         losses and a wrong one shows; add e.g. [[shapes]] batch = 64, m = 3, \
                         k = {}",
                        params.total.name(),
                        shapes[0].k
                    ),
                ));
            }
            // A total of rows runs no op on the rows' values or the total.
            if !params.reduce.reads_targets() && !spec.epilogue.is_empty() {
                return Err(self.err(
                    "epilogue",
                    format!(
                        "a total (params.total = \"{}\") takes no [[epilogue]] ops: ops on \
                         each element go in [[before]], ops on the total outside the workload",
                        params.total.name()
                    ),
                ));
            }
            // A sum of many values into f16 may pass its 65504: losses are at most about
            // ln k + 8 each for the harness's inputs in (-4, 4), other values 4 times the
            // ops' growth.
            if params.total == TotalKind::Sum
                && out_dtype == DType::F16
                && !params.reduce.reads_targets()
            {
                return Err(self.err(
                    "out_dtype",
                    "a total sum of a batch item's values into f16 may pass its largest value \
                     (65504); set out_dtype = \"f32\"",
                ));
            }
            if params.total == TotalKind::Sum && out_dtype == DType::F16 {
                if let Some((i, sh)) = shapes
                    .iter()
                    .enumerate()
                    .find(|(_, sh)| sh.m as f64 * ((sh.k.max(1) as f64).ln() + 8.0) > 65504.0)
                {
                    return Err(self.err(
                        format!("shapes[{i}]"),
                        format!(
                            "{} rows' losses summed may pass f16's largest value (65504); set \
                             out_dtype = \"f32\"",
                            sh.m
                        ),
                    ));
                }
            }
        }
        if params.reduce.reads_targets() && layouts.a != Layout::Row {
            return Err(self.err(
                "layout.a",
                "a cross entropy reads rows of logits, each row contiguous (torch's (N, C) \
                 input); leave layout.a out",
            ));
        }
        if family == Family::Reduce && params.reduce.is_index() {
            // Indices are checked on the device as f32 after a timed launch: exact below 2^24.
            if let Some((i, sh)) = shapes.iter().enumerate().find(|(_, sh)| sh.k > MAX_INDEX_K) {
                return Err(self.err(
                    format!("shapes[{i}].k"),
                    format!(
                        "{} elements a row; an argmax / argmin takes rows of at most 2^24 \
                         ({MAX_INDEX_K})",
                        sh.k
                    ),
                ));
            }
        }
        // A softmax's ops run on each input element before it ([[before]]), and are its
        // chain (as gemm_softmax's [[epilogue]] is): the kernels and the references
        // evaluate them where they read the row.
        let softmax = matches!(family, Family::Softmax | Family::LogSoftmax);
        let mut chain = if softmax {
            self.softmax_chain(family, out_dtype, &spec.epilogue, &spec.before)?
        } else {
            self.chain(family, out_dtype, &params, &spec.epilogue)?
        };
        chain.rank = shapes[0].dims.as_slice().len() as u8;
        // A softmax normalizes the last dim: its rows stay rows of the last dim, whatever
        // its broadcast operands span.
        chain.rows_of_last_dim = softmax;
        self.channel_operands(family, &layouts, &shapes, &chain)?;
        // family norm's batch norm: row i of every batch item together (an (N, C, ...)
        // input's channel over its samples), each row contiguous.
        if family == Family::Norm && params.norm == NormKind::Batch && layouts.a != Layout::Row {
            return Err(self.err(
                "layout.a",
                "norm = \"batch\" normalizes row i of every batch item together, each row \
                 contiguous (batch N, m = C rows of an (N, C, ...) input's spatial values); \
                 leave layout.a out",
            ));
        }
        let after = self.after(family, out_dtype, &spec.after)?;
        // A reduction's [[before]] tensors are indexed like A (its input, in A's type), a
        // scan's like D (A's shape and layout; in A's type); gemm_norm's like D (the
        // product, in D's type).
        let before_dtype = if family == Family::GemmNorm {
            chain_dtype(out_dtype)
        } else {
            spec.dtype
        };
        let before = if softmax {
            Chain::default()
        } else {
            self.before(family, before_dtype, &spec.before, &chain)?
        };
        self.broadcast_operands(family, &layouts, &mut shapes, &[&chain, &before, &after])?;
        // An index is compared exactly: no op may change which element wins by rounding, and
        // none applies to an index. A cross entropy's ops would be ops on the logits or on the
        // loss, which the target's pick and the total do not take yet.
        let no_ops = match params.reduce {
            _ if family != Family::Reduce => None,
            r if r.is_index() => Some("it writes the index of an input element, compared exactly"),
            r if r.reads_targets() => Some("scale the logits or the loss outside the workload"),
            _ => None,
        };
        if let Some(why) = no_ops {
            for (table, empty) in [
                ("before", before.is_identity()),
                ("epilogue", chain.is_identity()),
            ] {
                if !empty {
                    return Err(self.err(
                        table,
                        format!(
                            "reduce = \"{}\" takes no [[{table}]] ops: {why}",
                            params.reduce.name()
                        ),
                    ));
                }
            }
        }
        let tolerance =
            self.tolerance(family, &params, out_dtype, spec.allow_tf32, spec.tolerance)?;
        // Fused work is measured first against the unfused sequence it replaces.
        let fused = match family {
            Family::GemmGlu | Family::GemmSoftmax | Family::GemmReduce | Family::GemmNorm => true,
            Family::Gemm | Family::GemmBiasAct => !chain.is_identity(),
            Family::Activation => chain.steps.len() > 1,
            // A cross entropy replaces PyTorch's log-softmax and NLL passes.
            Family::Reduce => params.reduce.reads_targets(),
            // Ops before a softmax replace the elementwise passes PyTorch runs first.
            Family::Softmax | Family::LogSoftmax => !chain.is_identity(),
            Family::Norm | Family::Scan => false,
        };
        let target = self.target(family, fused, spec.view.is_some(), spec.target)?;
        let view = match &spec.view {
            None => None,
            Some(v) => Some(self.view(family, &shapes, v)?),
        };

        let w = Workload {
            name,
            path: self.path.to_path_buf(),
            description,
            family,
            dtype: spec.dtype,
            out_dtype,
            acc_dtype,
            allow_tf32: spec.allow_tf32,
            layouts,
            shapes,
            params,
            chain,
            after,
            before,
            tolerance,
            target,
            view,
        };
        // Admission: a shape no GPU could hold is refused here, before anything allocates.
        for (i, sh) in w.shapes.iter().enumerate() {
            let bytes = w.device_bytes(sh);
            if bytes > MAX_DEVICE_BYTES {
                return Err(self.err(
                    format!("shapes[{i}]"),
                    format!(
                        "{sh} needs about {} of device memory to validate ({} of operands \
                         and output alone): more than any GPU holds ({}); make it smaller",
                        human_bytes(bytes),
                        human_bytes(w.min_bytes(sh)),
                        human_bytes(MAX_DEVICE_BYTES)
                    ),
                ));
            }
        }
        Ok(w)
    }

    /// `[view]`: the activation family only, shapes given as dims (the output's), and an
    /// input that a launch can address.
    fn view(&self, family: Family, shapes: &[Shape], v: &ViewSpec) -> Result<View> {
        if family != Family::Activation {
            return Err(self.err(
                "view",
                format!(
                    "only family activation reads its input through a view, not {family}; \
                     remove [view]"
                ),
            ));
        }
        if shapes[0].dims.is_empty() {
            return Err(self.err(
                "shapes[0].dims",
                "missing: with [view] every shape gives dims = [the output's dims] (the \
                 view's, outermost first) instead of m and n",
            ));
        }
        let view = View::new(v, shapes[0].dims.as_slice().len())
            .map_err(|(field, message)| self.err(field, message))?;
        for (i, sh) in shapes.iter().enumerate() {
            view.check_dims(sh.dims.as_slice())
                .map_err(|(field, message)| {
                    self.err(
                        field,
                        format!("shapes[{i}].dims {:?}: {message}", sh.dims.as_slice()),
                    )
                })?;
            let input: u64 = view
                .input_dims(sh.dims.as_slice())
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .unwrap_or(u64::MAX);
            if input > i64::MAX as u64 / 8 {
                return Err(self.err(
                    format!("shapes[{i}].dims"),
                    format!("the view's input of {input} elements cannot be addressed"),
                ));
            }
        }
        Ok(view)
    }

    /// The epilogue chain: for gemm_bias_act the bias add and the activation first, for
    /// the activation family the activation first, then the `[[epilogue]]` ops.
    fn chain(
        &self,
        family: Family,
        out_dtype: DType,
        params: &Params,
        specs: &[OpSpec],
    ) -> Result<Chain> {
        let mut chain = Chain::default();
        let out_dtype = chain_dtype(out_dtype);
        if !specs.is_empty() && !family.has_chain() {
            return Err(self.err(
                "epilogue",
                format!(
                    "only for families gemm, gemm_bias_act, gemm_softmax (before the softmax), \
                     gemm_norm (after the norm), activation, norm, reduce and scan, not {family}"
                ),
            ));
        }
        let act = Op::Act(
            params.activation,
            f64::from(params.act_alpha),
            f64::from(params.act_beta),
        );
        match family {
            Family::GemmBiasAct => {
                if params.bias {
                    let t = chain.add_tensor(TensorKind::Row, out_dtype, "bias");
                    chain.push(Op::Binary(BinOp::Add, Operand::Tensor(t)));
                }
                chain.push(act);
            }
            Family::Activation if params.activation != Activation::Identity || specs.is_empty() => {
                chain.push(act)
            }
            _ => {}
        }
        self.extend_chain(&mut chain, "epilogue", specs, out_dtype)?;
        // An index op (triu, tril) keeps one side of each m x n matrix's diagonal: for the
        // families whose chain runs on a whole matrix's elements at their positions.
        if chain.positional()
            && !matches!(
                family,
                Family::Gemm
                    | Family::GemmBiasAct
                    | Family::GemmSoftmax
                    | Family::Activation
                    | Family::Softmax
                    | Family::LogSoftmax
            )
        {
            let i = first_index_op(specs).unwrap_or_default();
            return Err(self.err(
                format!("epilogue[{i}].op"),
                format!(
                    "triu and tril are taken by families gemm, gemm_bias_act, gemm_softmax \
                     (before the softmax) and activation, not {family}"
                ),
            ));
        }
        // gemm_reduce's chain runs on the m x n product before the reduction: a row (a
        // bias) or a column operand, not a matrix (the workload's tensors are D-shaped).
        if family == Family::GemmReduce {
            if let Some(t) = chain.tensors.iter().find(|t| t.kind == TensorKind::Matrix) {
                return Err(self.err(
                    "epilogue",
                    format!(
                        "family gemm_reduce's [[epilogue]] ops may read a row (n values) or \
                         a column (m values) operand, not a matrix (`{}`)",
                        t.name
                    ),
                ));
            }
        }
        // A reduction's D is one value a row: the only tensor it can be combined with is a
        // column operand (one value a row).
        if family == Family::Reduce {
            if let Some(t) = chain.tensors.iter().find(|t| t.kind != TensorKind::Col) {
                return Err(self.err(
                    "epilogue",
                    format!(
                        "family reduce writes one value a row: tensor `{}` must be operand = \
                         \"col\" (m values), not \"{}\"",
                        t.name,
                        t.kind.name()
                    ),
                ));
            }
        }
        Ok(chain)
    }

    /// A `channel` operand (a per-channel weight of rows that hold several channels): read
    /// by family norm's row-major kernel only, and each shape's row must split into its
    /// channels.
    fn channel_operands(
        &self,
        family: Family,
        layouts: &Layouts,
        shapes: &[Shape],
        chain: &Chain,
    ) -> Result<()> {
        let channels: Vec<(&crate::spec::chain::Tensor, u32)> = chain
            .tensors
            .iter()
            .filter_map(|t| match t.kind {
                TensorKind::Channel(r) => Some((t, r)),
                _ => None,
            })
            .collect();
        let Some(&(t, _)) = channels.first() else {
            return Ok(());
        };
        if family != Family::Norm || layouts.a != Layout::Row {
            return Err(self.err(
                "epilogue",
                format!(
                    "operand \"channel\" (`{}`) is read by family norm with row-major rows \
                     only (a GroupNorm's per-channel weight and bias), not {family}{}; a \
                     per-channel vector of rows that hold one channel each is operand = \"col\"",
                    t.name,
                    if layouts.a == Layout::Row {
                        ""
                    } else {
                        " with layout.a = \"col\""
                    }
                ),
            ));
        }
        // Every channel operand's channels, each shape's row (n >= R then too).
        for &(t, r) in &channels {
            if let Some((i, sh)) = shapes
                .iter()
                .enumerate()
                .find(|(_, sh)| sh.n % u64::from(r) != 0)
            {
                return Err(self.err(
                    format!("shapes[{i}].n"),
                    format!(
                        "{} values a row do not split into the {r} channels of `{}` \
                         (channels = {r}): n must be a multiple of {r}",
                        sh.n, t.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `broadcast` operands (a tensor spanning some of the output's dims): families
    /// activation, softmax and log_softmax, row-major, every shape given as `dims` of one rank, each operand's runs
    /// of spanned row dims within the ABI's terms, and rows that fit the kernels' 32-bit
    /// row index.
    ///
    /// Shapes given as `dims` are then viewed as rows of the trailing dims every broadcast
    /// operand treats alike ([`Chain::broadcast_tail`]): an [N, C, H, W] output with a
    /// [1, C, 1, 1] operand is N * C rows of H * W.
    fn broadcast_operands(
        &self,
        family: Family,
        layouts: &Layouts,
        shapes: &mut [Shape],
        chains: &[&Chain],
    ) -> Result<()> {
        // The table the operands were written in.
        let softmax = matches!(family, Family::Softmax | Family::LogSoftmax);
        let table = if softmax { "before" } else { "epilogue" };
        let tensors: Vec<(&crate::spec::chain::Tensor, u8)> = chains
            .iter()
            .flat_map(|c| c.tensors.iter())
            .filter_map(|t| match t.kind {
                TensorKind::Broadcast(mask) => Some((t, mask)),
                _ => None,
            })
            .collect();
        // With dims, every tensor operand is a broadcast one (over = [the last dim] is a
        // row vector, over = every dim a matrix).
        if !shapes[0].dims.is_empty() {
            if let Some(t) = chains
                .iter()
                .flat_map(|c| c.tensors.iter())
                .find(|t| !matches!(t.kind, TensorKind::Broadcast(_)))
            {
                return Err(self.err(
                    table,
                    format!(
                        "operand `{}` is {}; with shapes given as dims every tensor operand is \
                         operand = \"broadcast\" with over = [the dims it spans] (the last \
                         dim alone for a row vector, every dim for a tensor like the output)",
                        t.name,
                        t.kind.name()
                    ),
                ));
            }
            // triu / tril index each m x n matrix, which torch takes as the last two dims:
            // not the rows of merged dims the kernels see here (a softmax's rows stay the
            // last dim: its index ops see each row modulo the next-to-last dim).
            if !softmax && chains.iter().any(|c| c.positional()) {
                return Err(self.err(
                    table,
                    "triu / tril with shapes given as dims: give the shapes as m and n (the \
                     last two dims, the rows of the others)",
                ));
            }
            let tail = chains[0].broadcast_tail();
            for (i, sh) in shapes.iter_mut().enumerate() {
                let dims = sh.dims.as_slice();
                let split = dims.len().saturating_sub(tail);
                sh.m = dims[..split].iter().product();
                sh.n = dims[split..].iter().product();
                if sh.n > i32::MAX as u64 {
                    return Err(self.err(
                        format!("shapes[{i}].dims"),
                        format!(
                            "the trailing dims every operand treats alike ({:?}) hold {} \
                             values, the row the kernels see; at most 2^31 - 1",
                            &dims[split..],
                            sh.n
                        ),
                    ));
                }
            }
        }
        let Some(&(first, _)) = tensors.first() else {
            return Ok(());
        };
        if family != Family::Activation && !softmax {
            return Err(self.err(
                table,
                format!(
                    "operand \"broadcast\" (`{}`) is read by families activation, softmax and \
                     log_softmax only, not {family}; use row, col or matrix operands here",
                    first.name
                ),
            ));
        }
        if layouts.a != Layout::Row || layouts.c != Layout::Row {
            return Err(self.err(
                "layout",
                format!(
                    "operand \"broadcast\" (`{}`) indexes a row-major output of dims (as \
                     PyTorch stores it); leave layout out",
                    first.name
                ),
            ));
        }
        // Every shape gives dims, or none (`shapes` checked that).
        if shapes[0].dims.is_empty() {
            return Err(self.err(
                "shapes[0].dims",
                format!(
                    "missing: operand \"broadcast\" (`{}`) names output dims, so every shape \
                     gives dims = [the output's dims] instead of m and n",
                    first.name
                ),
            ));
        }
        let tail = chains[0].broadcast_tail();
        for (i, sh) in shapes.iter().enumerate() {
            let dims = sh.dims.as_slice();
            if sh.m > i32::MAX as u64 {
                return Err(self.err(
                    format!("shapes[{i}].dims"),
                    format!(
                        "{} rows (the product of the dims before the trailing ones every \
                         broadcast operand treats alike); a broadcast operand's kernels index \
                         rows in 31 bits",
                        sh.m
                    ),
                ));
            }
            for &(t, mask) in &tensors {
                if let Err(m) = crate::spec::chain::BroadcastMap::new(dims, mask, tail) {
                    return Err(self.err(
                        table,
                        format!(
                            "broadcast operand `{}` (over = {}): {m}",
                            t.name,
                            crate::spec::chain::mask_dims(mask)
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Appends the ops of table `table` (`epilogue`, `after`, `before`) to `chain`, an error
    /// naming the entry and field (`before[2].operand`).
    fn extend_chain(
        &self,
        chain: &mut Chain,
        table: &str,
        specs: &[OpSpec],
        dtype: DType,
    ) -> Result<()> {
        self.extend_chain_at(chain, table, specs, dtype, table == "epilogue")
    }

    /// [`Self::extend_chain`], `positions` telling whether the values have a place in an
    /// m x n matrix (index ops allowed).
    fn extend_chain_at(
        &self,
        chain: &mut Chain,
        table: &str,
        specs: &[OpSpec],
        dtype: DType,
        positions: bool,
    ) -> Result<()> {
        chain
            .extend_from_spec(specs, dtype)
            .map_err(|e| match e.index {
                Some(i) => self.err(format!("{table}[{i}].{}", e.field), e.message),
                None => self.err(table, e.message),
            })?;
        // [[before]] and [[after]] ops run on values that have no place in D's matrix
        // (except a softmax's, on its m x n input).
        if !positions {
            if let Some(i) = first_index_op(specs) {
                return Err(self.err(
                    format!("{table}[{i}].op"),
                    "triu and tril are [[epilogue]] ops (of gemm, gemm_bias_act, gemm_softmax \
                     and activation) and [[before]] ops of softmax and log_softmax",
                ));
            }
        }
        Ok(())
    }

    /// softmax's and log_softmax's `[[before]]` ops: on each element of the m x n input
    /// before the softmax (an attention mask added, a scale, a causal `tril`), their
    /// tensors indexed like the input (row, col, matrix, or broadcast over dims). They
    /// become the workload's chain, run before the row op as gemm_softmax's is; nothing
    /// after the softmax is fused.
    fn softmax_chain(
        &self,
        family: Family,
        out_dtype: DType,
        epilogue: &[OpSpec],
        before: &[OpSpec],
    ) -> Result<Chain> {
        if !epilogue.is_empty() {
            return Err(self.err(
                "epilogue",
                format!(
                    "family {family} fuses ops before the softmax only: write them as \
                     [[before]] (an attention mask, a scale, a causal tril); ops after it run \
                     outside the workload"
                ),
            ));
        }
        let mut chain = Chain::default();
        self.extend_chain_at(&mut chain, "before", before, chain_dtype(out_dtype), true)?;
        self.no_channel_before(&chain, "row, col, matrix or broadcast")?;
        Ok(chain)
    }

    /// Refuses a channel operand among `[[before]]` ops, which read `kinds` operands.
    fn no_channel_before(&self, before: &Chain, kinds: &str) -> Result<()> {
        match before
            .tensors
            .iter()
            .find(|t| matches!(t.kind, TensorKind::Channel(_)))
        {
            Some(t) => Err(self.err(
                "before",
                format!(
                    "[[before]] ops read {kinds} operands; `{}` is a channel operand (family \
                     norm's [[epilogue]] only)",
                    t.name
                ),
            )),
            None => Ok(()),
        }
    }

    /// gemm_reduce's `[[after]]` ops: on each reduced value, reading no tensor.
    fn after(&self, family: Family, out_dtype: DType, specs: &[OpSpec]) -> Result<Chain> {
        let mut chain = Chain::default();
        if specs.is_empty() {
            return Ok(chain);
        }
        if family != Family::GemmReduce {
            return Err(self.err(
                "after",
                format!(
                    "only for family gemm_reduce (ops on each reduced value), not {family}; \
                     use [[epilogue]]"
                ),
            ));
        }
        self.extend_chain(&mut chain, "after", specs, out_dtype)?;
        if let Some(t) = chain.tensors.first() {
            return Err(self.err(
                "after",
                format!(
                    "[[after]] ops read no tensor (`{}` is one); constants, `z` (the reduced \
                     value) and saved names only",
                    t.name
                ),
            ));
        }
        Ok(chain)
    }

    /// reduce's `[[before]]` ops: on each element of A before the reduction. Their tensors
    /// are indexed like A (`matrix`: m x k, `row`: k values, `col`: m values), in A's type
    /// unless an op says otherwise, and share the four operand slots with the epilogue's.
    /// A scan's are on each element of A before the scan (`torch.cumsum(x * mask)`), indexed
    /// like D (m x n, A's layout); gemm_norm's on the product, indexed like D.
    fn before(
        &self,
        family: Family,
        dtype: DType,
        specs: &[OpSpec],
        chain: &Chain,
    ) -> Result<Chain> {
        let mut before = Chain::default();
        if specs.is_empty() {
            return Ok(before);
        }
        if !matches!(family, Family::Reduce | Family::Scan | Family::GemmNorm) {
            return Err(self.err(
                "before",
                format!(
                    "only for families reduce (ops on each element before the reduction), \
                     scan (before the scan: a masked cumsum) and gemm_norm (ops on the \
                     product before the norm), not {family}"
                ),
            ));
        }
        self.extend_chain(&mut before, "before", specs, dtype)?;
        self.no_channel_before(&before, "row, col or matrix")?;
        let total = before.tensors.len() + chain.tensors.len();
        if total > MAX_TENSORS {
            return Err(self.err(
                "before",
                format!(
                    "[[before]] and [[epilogue]] read {total} tensors together; at most \
                     {MAX_TENSORS} (the operand slots of cs_problem)"
                ),
            ));
        }
        Ok(before)
    }

    /// `[layout]` of a norm: A row or column (a column-major A holds the rows side by side,
    /// as a reduction over a middle dimension does), D the same.
    fn norm_layouts(&self, family: Family, l: &LayoutSpec) -> Result<Layouts> {
        if l.b.is_some() || l.shared.is_some() {
            return Err(self.err(
                "layout",
                format!(
                    "family {family} has one operand: only `a` (and `c`, equal to it) may be set"
                ),
            ));
        }
        let a = l.a.unwrap_or(Layout::Row);
        let c = l.c.unwrap_or(a);
        if c != a {
            return Err(self.err(
                "layout.c",
                format!(
                    "a {family} writes D in A's layout (\"{a}\"); set c = \"{a}\" or leave it out"
                ),
            ));
        }
        Ok(Layouts {
            a,
            b: Layout::Row,
            c,
            shared_a: false,
            shared_b: false,
        })
    }

    /// A reduction's layouts: A's (`a`, row or col); D is m x 1, written as a row.
    fn reduce_layouts(&self, l: &LayoutSpec) -> Result<Layouts> {
        if l.b.is_some() || l.shared.is_some() || l.c.is_some() {
            return Err(self.err(
                "layout",
                "family reduce has one operand: only `a` may be set (D is one value a row)",
            ));
        }
        Ok(Layouts {
            a: l.a.unwrap_or(Layout::Row),
            b: Layout::Row,
            c: Layout::Row,
            shared_a: false,
            shared_b: false,
        })
    }

    /// The file stem, checked against the optional `name` field.
    fn name(&self, declared: Option<&str>) -> Result<String> {
        let stem = self
            .path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if !is_workload_name(stem) {
            return Err(self.err(
                "name",
                format!(
                    "the file stem \"{stem}\" is not a workload name; allowed: lowercase \
                     letters, digits, '_' and '-'"
                ),
            ));
        }
        match declared {
            Some(n) if n != stem => Err(self.err(
                "name",
                format!(
                    "\"{n}\" does not match the file name; it must equal the file stem \
                     \"{stem}\" (or be left out)"
                ),
            )),
            _ => Ok(stem.to_string()),
        }
    }

    fn dtypes(&self, spec: &WorkloadSpec) -> Result<(DType, DType)> {
        let family = spec.family;
        if spec.allow_tf32 && !(family.is_gemm() && spec.dtype == DType::F32) {
            return Err(self.err(
                "allow_tf32",
                format!(
                    "tf32 only applies to f32 operands of a GEMM family (this is {family} \
                     on {}); remove it",
                    spec.dtype
                ),
            ));
        }
        if spec.dtype.is_fp8() && !matches!(family, Family::Gemm | Family::GemmBiasAct) {
            return Err(self.err(
                "dtype",
                format!(
                    "fp8 ({}) operands are for families gemm and gemm_bias_act, not {family}",
                    spec.dtype
                ),
            ));
        }
        // An index reduction (argmax, argmin) writes int64 indices, as torch's do.
        let index = family == Family::Reduce && spec.params.reduce.is_some_and(|r| r.is_index());
        if spec.dtype.is_int() {
            return Err(self.err(
                "dtype",
                "i64 is only an output (out_dtype of a reduce with reduce = \"argmax\" or \
                 \"argmin\"); operands are f32, f16, bf16, e4m3 or e5m2",
            ));
        }
        if spec.dtype == DType::Bool || spec.out_dtype == Some(DType::Bool) {
            return Err(self.err(
                if spec.dtype == DType::Bool {
                    "dtype"
                } else {
                    "out_dtype"
                },
                "bool is the type of a mask operand of an op (`dtype = \"bool\"` in its \
                 [[epilogue]] or [[before]] entry), not of A or D",
            ));
        }
        match spec.out_dtype {
            Some(d) if index && d != DType::I64 => {
                return Err(self.err(
                    "out_dtype",
                    format!(
                        "an argmax / argmin writes i64 indices (as torch's do), not {d}; \
                         leave out_dtype out or set \"i64\""
                    ),
                ))
            }
            Some(DType::I64) if !index => {
                return Err(self.err(
                    "out_dtype",
                    format!(
                        "i64 is the output of family reduce with reduce = \"argmax\" or \
                         \"argmin\" only, not of this {family}"
                    ),
                ))
            }
            _ => {}
        }
        // fp8 products are accumulated in fp32 and written wider unless asked otherwise.
        let out_dtype = spec.out_dtype.unwrap_or(if index {
            DType::I64
        } else if spec.dtype.is_fp8() {
            DType::BF16
        } else {
            spec.dtype
        });
        if out_dtype.is_fp8() && !spec.dtype.is_fp8() {
            return Err(self.err(
                "out_dtype",
                format!("an fp8 output needs fp8 operands, not {}", spec.dtype),
            ));
        }
        if matches!(
            family,
            Family::Norm | Family::Reduce | Family::GemmReduce | Family::Scan
        ) && !(out_dtype == spec.dtype || out_dtype == DType::F32 || index)
        {
            return Err(self.err(
                "out_dtype",
                format!("a {family} writes {} or f32, not {out_dtype}", spec.dtype),
            ));
        }
        let acc_dtype = spec.acc_dtype.unwrap_or(DType::F32);
        let f16_acc_ok = family.is_gemm() && spec.dtype == DType::F16;
        if acc_dtype != DType::F32 && !(acc_dtype == DType::F16 && f16_acc_ok) {
            return Err(self.err(
                "acc_dtype",
                format!(
                    "{acc_dtype} accumulation is not supported here; allowed: f32{}",
                    if f16_acc_ok { ", f16" } else { "" }
                ),
            ));
        }
        Ok((out_dtype, acc_dtype))
    }

    fn shapes(&self, family: Family, specs: &[ShapeSpec]) -> Result<Vec<Shape>> {
        if specs.is_empty() {
            return Err(self.err(
                "shapes",
                "at least one [[shapes]] entry is required (the first is the headline)",
            ));
        }
        let mut shapes: Vec<Shape> = Vec::with_capacity(specs.len());
        for (i, s) in specs.iter().enumerate() {
            let shape = self.shape(family, i, s)?;
            if let Some(j) = shapes.iter().position(|t| *t == shape) {
                return Err(self.err(
                    format!("shapes[{i}]"),
                    format!("repeats shapes[{j}] ({shape}); remove one"),
                ));
            }
            // Shapes given as dims: all of them, of one rank (their operands and the
            // rows the kernels see are defined by the dims).
            if let Some(first) = shapes.first() {
                let (r0, r) = (first.dims.as_slice().len(), shape.dims.as_slice().len());
                if r0 != r {
                    return Err(self.err(
                        format!("shapes[{i}].dims"),
                        if r0 == 0 || r == 0 {
                            "give every shape as dims, or none: shapes given as dims and as m \
                             and n do not mix"
                                .to_string()
                        } else {
                            format!(
                                "{r} dims, but shapes[0] has {r0}: every shape has the same rank"
                            )
                        },
                    ));
                }
            }
            shapes.push(shape);
        }
        Ok(shapes)
    }

    fn shape(&self, family: Family, i: usize, s: &ShapeSpec) -> Result<Shape> {
        let field = |d: &str| format!("shapes[{i}].{d}");
        let dim = |d: &str, v: Option<i64>, default: Option<u64>| -> Result<u64> {
            match (v, default) {
                (Some(v), _) if v > 0 => Ok(v.unsigned_abs()),
                (Some(v), _) => Err(self.err(field(d), format!("must be positive, got {v}"))),
                (None, Some(d)) => Ok(d),
                (None, None) => Err(self.err(
                    field(d),
                    format!("missing; {family} shapes need {}", needs(family)),
                )),
            }
        };
        let forbid = |d: &str, v: Option<i64>| -> Result<()> {
            match v {
                Some(_) => Err(self.err(
                    field(d),
                    format!("not used by {family}; allowed: {}", needs(family)),
                )),
                None => Ok(()),
            }
        };
        let takes_dims = matches!(
            family,
            Family::Activation | Family::Softmax | Family::LogSoftmax
        );
        if s.dims.is_some() && !takes_dims {
            return Err(self.err(
                field("dims"),
                format!(
                    "only families activation, softmax and log_softmax take dims, not \
                     {family}; give {}",
                    needs(family)
                ),
            ));
        }
        let shape = match family {
            Family::Gemm
            | Family::GemmBiasAct
            | Family::GemmSoftmax
            | Family::GemmGlu
            | Family::GemmReduce
            | Family::GemmNorm => Shape {
                m: dim("m", s.m, None)?,
                n: dim("n", s.n, None)?,
                k: dim("k", s.k, None)?,
                batch: dim("batch", s.batch, Some(1))?,
                dims: Default::default(),
            },
            // A softmax over the last dim of dims: the rows are every other dim.
            Family::Activation | Family::Softmax | Family::LogSoftmax => {
                forbid("k", s.k)?;
                forbid("batch", s.batch)?;
                let min_m = if family == Family::Activation {
                    Some(1)
                } else {
                    None
                };
                match &s.dims {
                    None => Shape::rows(dim("m", s.m, min_m)?, dim("n", s.n, None)?),
                    Some(dims) => {
                        if s.m.is_some() || s.n.is_some() {
                            return Err(self.err(
                                field(if s.m.is_some() { "m" } else { "n" }),
                                "give either dims (the output's dims) or m and n, not both",
                            ));
                        }
                        if dims.len() < 2 || dims.len() > MAX_DIMS {
                            return Err(self.err(
                                field("dims"),
                                format!(
                                    "{} dims; 2 to {MAX_DIMS} (the output's, outermost first)",
                                    dims.len()
                                ),
                            ));
                        }
                        let mut v = Vec::with_capacity(dims.len());
                        for (j, &d) in dims.iter().enumerate() {
                            if d <= 0 {
                                return Err(self.err(
                                    format!("shapes[{i}].dims[{j}]"),
                                    format!("must be positive, got {d}"),
                                ));
                            }
                            v.push(d.unsigned_abs());
                        }
                        let (rows, last) = v.split_at(v.len() - 1);
                        let m = rows
                            .iter()
                            .try_fold(1u64, |a, &d| a.checked_mul(d))
                            .unwrap_or(u64::MAX);
                        let mut shape = Shape::rows(m, last[0]);
                        shape.dims = Dims::new(&v).unwrap_or_default();
                        shape
                    }
                }
            }
            Family::Norm | Family::Scan => {
                forbid("k", s.k)?;
                Shape {
                    m: dim("m", s.m, Some(1))?,
                    n: dim("n", s.n, None)?,
                    k: 0,
                    batch: dim("batch", s.batch, Some(1))?,
                    dims: Default::default(),
                }
            }
            // Rows of k elements, each reduced to one: D is m x 1.
            Family::Reduce => {
                forbid("n", s.n)?;
                Shape {
                    m: dim("m", s.m, Some(1))?,
                    n: 1,
                    k: dim("k", s.k, None)?,
                    batch: dim("batch", s.batch, Some(1))?,
                    dims: Default::default(),
                }
            }
        };
        // Every operand's element count must fit the ABI's int64 sizes and strides.
        let fits = |a: u64, b: u64| {
            a.checked_mul(b)
                .and_then(|x| x.checked_mul(shape.batch))
                .is_some_and(|x| x <= i64::MAX as u64 / 8)
        };
        let k = shape.k.max(1);
        if !(fits(shape.m, shape.n) && fits(shape.m, k) && fits(k, shape.n)) {
            return Err(self.err(
                format!("shapes[{i}]"),
                format!("{shape} is too large: an operand's byte size must fit in int64"),
            ));
        }
        Ok(shape)
    }

    fn params(
        &self,
        family: Family,
        dtype: DType,
        out_dtype: DType,
        p: &ParamsSpec,
    ) -> Result<Params> {
        let only = |field: &str, allowed: &str| {
            self.err(
                format!("params.{field}"),
                format!("not used by {family}; only for {allowed}"),
            )
        };
        let finite = |field: &str, v: Option<f32>| -> Result<()> {
            match v {
                Some(x) if !x.is_finite() => Err(self.err(
                    format!("params.{field}"),
                    format!("must be a finite number, got {x}"),
                )),
                _ => Ok(()),
            }
        };
        finite("alpha", p.alpha)?;
        finite("beta", p.beta)?;
        finite("leaky_slope", p.leaky_slope)?;
        finite("scale_a", p.scale_a)?;
        finite("scale_b", p.scale_b)?;
        finite("scale_d", p.scale_d)?;
        finite("eps", p.eps)?;
        if let Some(e) = p.eps.filter(|e| *e < 0.0) {
            return Err(self.err("params.eps", format!("must be >= 0, got {e}")));
        }
        let normalizes = matches!(family, Family::Norm | Family::GemmNorm);
        if !normalizes {
            if p.norm.is_some() {
                return Err(only("norm", "norm and gemm_norm"));
            }
            if p.eps.is_some() {
                return Err(only("eps", "norm and gemm_norm"));
            }
        }
        let norm = match (normalizes, p.norm) {
            (true, None) => {
                return Err(self.err(
                    "params.norm",
                    format!(
                        "missing; family {family} needs one; allowed: {}",
                        NormKind::ALL
                            .iter()
                            .map(|k| k.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
            (_, k) => k.unwrap_or(NormKind::Rms),
        };
        let groups = match (family, p.groups) {
            (Family::GemmNorm, Some(g)) if g > 1 && norm == NormKind::Batch => {
                return Err(self.err(
                    "params.groups",
                    "a batch norm normalizes whole columns; leave groups out",
                ))
            }
            (Family::GemmNorm, Some(g)) if g == 0 || g > i32::MAX as u32 => {
                return Err(self.err(
                    "params.groups",
                    format!("must be in 1..={}, got {g}", i32::MAX),
                ))
            }
            // L2 and L1 scale their tolerance with the row's length; a group's would differ.
            (Family::GemmNorm, Some(g)) if g > 1 && matches!(norm, NormKind::L2 | NormKind::L1) => {
                return Err(self.err(
                    "params.groups",
                    format!(
                        "groups of a row are normalized by layer or rms, not {}; leave \
                         groups out (the whole row)",
                        norm.name()
                    ),
                ))
            }
            (Family::GemmNorm, g) => g.unwrap_or(1),
            (_, Some(_)) => return Err(only("groups", "gemm_norm")),
            (_, None) => 1,
        };
        let reduce = match (family, p.reduce) {
            (Family::Reduce | Family::GemmReduce, None) => {
                return Err(self.err(
                    "params.reduce",
                    format!(
                        "missing; family {family} needs one; allowed: {}",
                        ReduceKind::ALL.map(ReduceKind::name).join(", ")
                    ),
                ))
            }
            (Family::GemmReduce, Some(r)) if r.is_index() || r.reads_targets() => {
                return Err(self.err(
                    "params.reduce",
                    format!(
                        "{} is for family reduce (an input's elements{}), not gemm_reduce",
                        r.name(),
                        if r.is_index() {
                            ", compared exactly; in gemm_reduce rounding decides near ties"
                        } else {
                            " and a target class a row"
                        }
                    ),
                ))
            }
            (Family::Reduce | Family::GemmReduce, Some(r)) => r,
            (_, Some(_)) => return Err(only("reduce", "reduce and gemm_reduce")),
            (_, None) => ReduceKind::Sum,
        };
        let ce = reduce.reads_targets();
        // A total: one value a batch item of its rows' values (a loss's mean, torch.sum of
        // a whole tensor) of family reduce's cross_entropy, sum or mean.
        let totals = ce
            || (family == Family::Reduce && matches!(reduce, ReduceKind::Sum | ReduceKind::Mean));
        if !totals && p.total.is_some() {
            return Err(only(
                "total",
                "family reduce's reduce = \"sum\", \"mean\" or \"cross_entropy\"",
            ));
        }
        if !ce && p.ignore_index.is_some() {
            return Err(only("ignore_index", "reduce = \"cross_entropy\""));
        }
        let scan = match (family, p.scan) {
            (Family::Scan, None) => {
                return Err(self.err(
                    "params.scan",
                    format!(
                        "missing; family scan needs one; allowed: {}",
                        ScanKind::ALL.map(ScanKind::name).join(", ")
                    ),
                ))
            }
            (Family::Scan, Some(k)) => k,
            (_, Some(_)) => return Err(only("scan", "scan")),
            (_, None) => ScanKind::Sum,
        };
        if family != Family::Scan {
            if p.reverse.is_some() {
                return Err(only("reverse", "scan"));
            }
            if p.exclusive.is_some() {
                return Err(only("exclusive", "scan"));
            }
        }
        if !dtype.is_fp8() {
            for (f, v) in [("scale_a", p.scale_a), ("scale_b", p.scale_b)] {
                if v.is_some() {
                    return Err(only(f, "fp8 operands (dtype = \"e4m3\" or \"e5m2\")"));
                }
            }
        }
        if p.scale_d.is_some() && !out_dtype.is_fp8() {
            return Err(only(
                "scale_d",
                "an fp8 output (out_dtype = \"e4m3\" or \"e5m2\")",
            ));
        }
        if p.gate.is_some() && family != Family::GemmGlu {
            return Err(only("gate", "gemm_glu"));
        }
        if p.log_softmax.is_some() && family != Family::GemmSoftmax {
            return Err(only(
                "log_softmax",
                "gemm_softmax (for a plain row log-softmax use family log_softmax)",
            ));
        }

        if !family.is_gemm() {
            if p.alpha.is_some() {
                return Err(only("alpha", "gemm and gemm_bias_act"));
            }
            if p.beta.is_some() {
                return Err(only("beta", "gemm and gemm_bias_act"));
            }
        }
        // gemm_reduce reduces alpha * A * B (+ its chain); a C term would be read as an
        // m x n matrix beside an m x 1 output.
        if family == Family::GemmReduce && p.beta.is_some_and(|b| b != 0.0) {
            return Err(self.err(
                "params.beta",
                "family gemm_reduce reads no C (beta must be 0); add a matrix before the \
                 reduction is not supported",
            ));
        }
        if p.bias.is_some() && family != Family::GemmBiasAct {
            return Err(only("bias", "gemm_bias_act"));
        }
        let activation = match (family, p.activation) {
            (Family::Gemm, Some(_)) => {
                return Err(self.err(
                    "params.activation",
                    "family gemm has no activation; use family = \"gemm_bias_act\" for a \
                     fused epilogue",
                ))
            }
            (
                Family::Norm
                | Family::Reduce
                | Family::GemmReduce
                | Family::GemmNorm
                | Family::Scan,
                Some(_),
            ) => {
                return Err(self.err(
                    "params.activation",
                    format!(
                        "family {family} applies its activation (or anything after the \
                         {family}) as [[epilogue]] ops; move it there"
                    ),
                ))
            }
            (
                Family::Softmax | Family::LogSoftmax | Family::GemmSoftmax | Family::GemmGlu,
                Some(_),
            ) => return Err(only("activation", "activation and gemm_bias_act")),
            (
                Family::Gemm
                | Family::Softmax
                | Family::LogSoftmax
                | Family::GemmSoftmax
                | Family::GemmGlu
                | Family::Norm
                | Family::Reduce
                | Family::GemmReduce
                | Family::GemmNorm
                | Family::Scan,
                None,
            ) => Activation::Identity,
            (Family::GemmBiasAct | Family::Activation, Some(a)) => a,
            // An activation-family workload may state its whole computation as [[epilogue]].
            (Family::Activation, None) => Activation::Identity,
            (Family::GemmBiasAct, None) => {
                return Err(self.err(
                    "params.activation",
                    format!(
                        "missing; {family} needs one; allowed: {}",
                        Activation::ALL
                            .iter()
                            .map(|a| a.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
        };
        // `alpha` is the GEMM's scale; written beside an elu, whose parameter is also
        // called alpha, it would be read as the scale silently.
        if family == Family::GemmBiasAct && p.alpha.is_some() && activation == Activation::Elu {
            return Err(self.err(
                "params.alpha",
                format!(
                    "is the GEMM's scale (alpha * A * B), not a parameter of {activation}; to \
                     set {activation}'s own, write the work as family = \"gemm\" with \
                     [[epilogue]] ops (op = \"add\", operand = \"row\" for the bias, then \
                     op = \"{activation}\" with its alpha / beta), where [params] alpha \
                     stays the GEMM's scale"
                ),
            ));
        }
        let (d0, d1) = activation.default_params();
        let act_alpha = match (activation, p.leaky_slope) {
            (Activation::LeakyRelu, s) => s.unwrap_or(0.01),
            (a, Some(_)) => {
                return Err(self.err(
                    "params.leaky_slope",
                    format!("only with activation = \"leaky_relu\", not \"{a}\""),
                ))
            }
            (_, None) => d0 as f32,
        };
        Ok(Params {
            activation,
            act_alpha,
            alpha: p.alpha.unwrap_or(1.0),
            beta: p.beta.unwrap_or(0.0),
            bias: family == Family::GemmBiasAct && p.bias.unwrap_or(true),
            act_beta: d1 as f32,
            scale_a: p.scale_a.unwrap_or(1.0),
            scale_b: p.scale_b.unwrap_or(1.0),
            scale_d: p.scale_d.unwrap_or(1.0),
            gate: if family == Family::GemmGlu {
                p.gate.unwrap_or(Activation::Silu)
            } else {
                Activation::Identity
            },
            log_softmax: p.log_softmax.unwrap_or(false),
            norm,
            eps: if normalizes {
                p.eps.unwrap_or(norm.default_eps())
            } else {
                0.0
            },
            groups,
            reduce,
            total: if ce {
                p.total.unwrap_or(TotalKind::Mean)
            } else {
                p.total.unwrap_or(TotalKind::None)
            },
            ignore_index: p.ignore_index.unwrap_or(-100),
            scan,
            reverse: p.reverse.unwrap_or(false),
            exclusive: p.exclusive.unwrap_or(false),
        })
    }

    fn tolerance(
        &self,
        family: Family,
        params: &Params,
        out_dtype: DType,
        tf32: bool,
        spec: Option<ToleranceSpec>,
    ) -> Result<Tolerance> {
        let mut t = Tolerance::default_for(family, out_dtype, tf32);
        // A row normalized to unit length (L2) or unit sum (L1) has elements of
        // 1/sqrt(n) or 1/n, and the mean of k signed elements shrinks like 1/sqrt(k): the
        // atol shrinks with them, else zeros would pass.
        match (family, params.norm, params.reduce) {
            (Family::Norm | Family::GemmNorm, NormKind::L2, _) => {
                t.atol_scale = AtolScale::InvSqrtN
            }
            (Family::Norm | Family::GemmNorm, NormKind::L1, _) => t.atol_scale = AtolScale::InvN,
            (Family::Reduce, _, ReduceKind::Mean) => t.atol_scale = AtolScale::InvSqrtK,
            (Family::GemmReduce, _, ReduceKind::Mean) => t.atol_scale = AtolScale::InvSqrtN,
            _ => {}
        }
        let Some(spec) = spec else { return Ok(t) };
        if family == Family::Reduce && params.reduce.is_index() {
            return Err(self.err(
                "tolerance",
                format!(
                    "reduce = \"{}\" writes an index, checked exactly; remove [tolerance]",
                    params.reduce.name()
                ),
            ));
        }
        for (field, v) in [("rtol", spec.rtol), ("atol", spec.atol)] {
            if let Some(x) = v {
                if !(x.is_finite() && x >= 0.0) {
                    return Err(self.err(
                        format!("tolerance.{field}"),
                        format!("must be a finite number >= 0, got {x}"),
                    ));
                }
            }
        }
        t.rtol = spec.rtol.unwrap_or(t.rtol);
        t.atol = spec.atol.unwrap_or(t.atol);
        t.atol_scale = spec.atol_scale.unwrap_or(t.atol_scale);
        if t.rtol == 0.0 && t.atol == 0.0 {
            return Err(self.err(
                "tolerance",
                "rtol and atol are both 0; floating-point results need some slack",
            ));
        }
        Ok(t)
    }

    fn target(
        &self,
        family: Family,
        fused: bool,
        viewed: bool,
        spec: Option<TargetSpec>,
    ) -> Result<Target> {
        let spec = spec.unwrap_or_default();
        let defaults = || {
            let mut d = family.default_baselines();
            if fused {
                d.insert(0, Baseline::Unfused);
                // cuDNN's op alone computes something else (no ops before the softmax,
                // one activation of a chain): the unfused sequence is the comparison.
                if matches!(
                    family,
                    Family::Activation | Family::Softmax | Family::LogSoftmax
                ) {
                    d.retain(|b| *b != Baseline::Cudnn);
                }
            }
            // cuDNN's activation and the unfused passes read the input packed, not through
            // the view: a view is timed against the copy of its bytes.
            if viewed {
                d.retain(|b| !matches!(b, Baseline::Cudnn | Baseline::Unfused));
            }
            d
        };
        let baselines = spec.baselines.unwrap_or_else(defaults);
        if baselines.is_empty() {
            return Err(self.err(
                "target.baselines",
                "empty; name at least one, or leave it out for the family's default",
            ));
        }
        let mut seen = BTreeSet::new();
        for b in &baselines {
            if !seen.insert(*b) {
                return Err(self.err("target.baselines", format!("\"{b}\" is listed twice")));
            }
            if viewed && matches!(b, Baseline::Cudnn | Baseline::Unfused) {
                return Err(self.err(
                    "target.baselines",
                    format!(
                        "\"{b}\" reads the input packed, not through [view]; a view is timed \
                         against \"copy\""
                    ),
                ));
            }
            // A fused reduction (a cross entropy) has its unfused sequence too.
            if !(b.supports(family) || *b == Baseline::Unfused && fused) {
                let ok: Vec<_> = [
                    Baseline::Cublas,
                    Baseline::Cublaslt,
                    Baseline::Cudnn,
                    Baseline::Torch,
                    Baseline::Copy,
                    Baseline::Unfused,
                ]
                .into_iter()
                .filter(|x| x.supports(family))
                .map(Baseline::name)
                .collect();
                return Err(self.err(
                    "target.baselines",
                    format!(
                        "\"{b}\" cannot run {family}; allowed for {family}: {}",
                        ok.join(", ")
                    ),
                ));
            }
        }
        let speedup_vs = spec.speedup_vs.unwrap_or(baselines[0]);
        if !baselines.contains(&speedup_vs) {
            return Err(self.err(
                "target.speedup_vs",
                format!(
                    "\"{speedup_vs}\" is not among the baselines timed; allowed: {}",
                    baselines
                        .iter()
                        .map(|b| b.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        // A fused kernel exists to beat the unfused sequence by a clear margin.
        let min_speedup = spec
            .min_speedup
            .unwrap_or(if speedup_vs == Baseline::Unfused {
                1.2
            } else {
                1.0
            });
        if !(min_speedup.is_finite() && min_speedup > 0.0) {
            return Err(self.err(
                "target.min_speedup",
                format!("must be a number > 0, got {min_speedup}"),
            ));
        }
        if let Some(f) = spec.min_roofline_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(self.err(
                    "target.min_roofline_fraction",
                    format!("must be in (0, 1], got {f}"),
                ));
            }
        }
        Ok(Target {
            baselines,
            speedup_vs,
            min_speedup,
            min_roofline_fraction: spec.min_roofline_fraction,
        })
    }
}

/// The dimensions a family's shapes take, for error messages.
fn needs(family: Family) -> &'static str {
    match family {
        Family::Gemm
        | Family::GemmBiasAct
        | Family::GemmSoftmax
        | Family::GemmGlu
        | Family::GemmReduce
        | Family::GemmNorm => "m, n, k (and optional batch)",
        Family::Activation => "n (and optional m rows)",
        Family::Softmax | Family::LogSoftmax => "m (rows) and n (columns), or dims",
        Family::Norm => "n (elements per row), optional m rows and batch",
        Family::Reduce => "k (elements reduced per row), optional m rows and batch",
        Family::Scan => "n (elements scanned per row), optional m rows and batch",
    }
}

/// Whether `s` may name a workload (a spec file's stem): lowercase letters, digits, '_'
/// and '-'.
pub fn is_workload_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// The entry of the first index op (triu, tril) of a table.
fn first_index_op(specs: &[OpSpec]) -> Option<usize> {
    specs
        .iter()
        .position(|s| crate::spec::chain::is_index_op(&s.op))
}
