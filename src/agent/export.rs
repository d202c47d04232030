//! `export`: the best kernel of a session as a standalone drop-in, with the project
//! headers it includes and a README saying how to build and call it and what it
//! measured.

use std::path::{Path, PathBuf};

use super::session::SessionDir;
use crate::error::{Error, Result};
use crate::pytorch::package;
use crate::spec::chain::TensorKind;
use crate::spec::Workload;

/// Writes the best kernel as a standalone drop-in: the `.cu`, the ABI header it
/// includes, and a README with how to build and call it and what it measured.
pub fn export(dir: &SessionDir, abi_include: &Path, out: &Path) -> Result<Vec<PathBuf>> {
    let (b, mut written) = write_best(
        dir,
        abi_include,
        |_| out.to_path_buf(),
        "// Build and call: see README.md beside this file.\n",
    )?;
    let readme = format!(
        "# {name}\n\nExported by cutesmith (session `{}`, version v{best}). {}\n\nMeasured: {measured}; correct on every shape of the workload ({}).\n\n## Build\n\n```sh\nnvcc -gencode=arch={compute},code={arch} -std=c++17 -O3 --expt-relaxed-constexpr \\\n     -Xcompiler -fPIC -shared -I<cutlass>/include -I<cutlass>/tools/util/include -I. \\\n     {name} -o lib{stem}.so\n```\n\n## Call\n\n```c\n#include \"cutesmith_abi.h\"\ncs_problem p = {{0}};\np.abi_version = CS_ABI_VERSION;   /* then family, m, n, k, batch, dtypes, layouts, */\n/* pointers, leading dimensions, alpha/beta, activation, sm_count: see the header */\nuint64_t ws = 0;\ncutesmith_workspace_bytes(&p, &ws);  /* allocate ws bytes (zeroed once), set p.workspace */\nint32_t err = cutesmith_launch(&p, stream);  /* 0 = CS_OK; enqueued on `stream` */\n```\n",
        b.spec.id,
        b.workload.description(),
        b.workload.shape_list(),
        name = b.file,
        best = b.version,
        measured = b.measured,
        stem = b.workload.name(),
        arch = b.spec.arch,
        compute = b.spec.arch.replacen("sm_", "compute_", 1)
    );
    let rd = out.join("README.md");
    std::fs::write(&rd, readme).map_err(|e| Error::io(&rd, e))?;
    written.push(rd);
    Ok(written)
}

/// A session's best version, written out as `<workload>.cu`.
struct Best {
    spec: super::session::SessionSpec,
    workload: Workload,
    version: u32,
    /// The kernel's file name.
    file: String,
    /// What the session measured for it, one sentence.
    measured: String,
}

/// Writes the best version of the session in `dir` into `out(workload)` as `<workload>.cu` (a
/// comment naming the session, the version and the workload, then `header_tail`, above
/// its source), with the ABI header and every other project header it includes (the GEMM
/// templates include the predicated fallback GEMM), so the files build on their own.
fn write_best(
    dir: &SessionDir,
    abi_include: &Path,
    out: impl FnOnce(&Workload) -> PathBuf,
    header_tail: &str,
) -> Result<(Best, Vec<PathBuf>)> {
    let spec = dir.load_spec()?;
    let state = dir.load_state()?;
    let workload = dir.workload(&spec)?;
    let out = out(&workload);
    let out = out.as_path();
    let best = state
        .best
        .ok_or_else(|| Error::Usage("no correct version to export yet".into()))?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(out, e))?;
    let file = format!("{}.cu", workload.name());
    let source = dir.version_source(best)?;
    let cu = out.join(&file);
    let header = format!(
        "// Exported by cutesmith from session {} (version v{best}).\n// Workload: {} - {}\n{header_tail}",
        spec.id,
        workload.name(),
        workload.description()
    );
    std::fs::write(&cu, format!("{header}{source}")).map_err(|e| Error::io(&cu, e))?;
    let mut written = vec![cu];
    written.extend(copy_headers(&source, abi_include, out)?);
    let measured = measured(&state, best, &workload);
    Ok((
        Best {
            spec,
            workload,
            version: best,
            file,
            measured,
        },
        written,
    ))
}

/// What the session measured for version `best`, one sentence.
fn measured(state: &super::session::State, best: u32, workload: &Workload) -> String {
    let v = state.version(best);
    match (v.and_then(|v| v.median_us), v.and_then(|v| v.vendor_us)) {
        (Some(t), Some(b)) => format!(
            "{t:.2} us on the headline shape {}, against {b:.2} us for the vendor library in the same run ({:.2}x)",
            workload.headline(),
            b / t
        ),
        (Some(t), None) => format!("{t:.2} us on the headline shape {}", workload.headline()),
        _ => "not timed".into(),
    }
}

/// Copies `cutesmith_abi.h` and every project header `source` includes, and the project
/// headers those include in turn, from `abi_include` into `out`.
fn copy_headers(source: &str, abi_include: &Path, out: &Path) -> Result<Vec<PathBuf>> {
    let available: Vec<String> = std::fs::read_dir(abi_include)
        .map_err(|e| Error::io(abi_include, e))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    let mut wanted: Vec<String> = vec!["cutesmith_abi.h".into()];
    let mut queue: Vec<String> = vec![source.to_string()];
    while let Some(text) = queue.pop() {
        for name in &available {
            if !wanted.contains(name) && text.contains(&format!("#include \"{name}\"")) {
                wanted.push(name.clone());
                let path = abi_include.join(name);
                queue.push(std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?);
            }
        }
    }
    wanted.sort();
    let mut written = Vec::new();
    for name in wanted {
        let (from, to) = (abi_include.join(&name), out.join(&name));
        std::fs::copy(&from, &to).map_err(|e| Error::io(&from, e))?;
        written.push(to);
    }
    Ok(written)
}

/// Writes the best kernel as a PyTorch package under `out` (see
/// [`crate::pytorch::package`]): the kernel and its headers in `<package>/csrc/`, the
/// operator, the build, the reference, `test_kernel.py` and a README. `cutlass_include`
/// is recorded as the build's last resort for the CUTLASS headers.
pub fn export_torch(
    dir: &SessionDir,
    abi_include: &Path,
    cutlass_include: Option<&Path>,
    out: &Path,
) -> Result<Vec<PathBuf>> {
    // The package's operator returns D shaped as the GEMM's m x n; a gemm_reduce D (one
    // value a row) would come back the wrong shape. Refused before anything is written.
    let w = dir.workload(&dir.load_spec()?)?;
    let family = w.family();
    if !w.before_chain().is_identity() {
        return Err(Error::Usage(
            "export --torch does not take the [[before]] ops of a reduction, a scan or gemm_norm \
             yet (its \
             operator passes the chain's operands only; a softmax's [[before]] ops are its \
             chain and are taken); `cutesmith export` without --torch writes the kernel and \
             its C ABI"
                .into(),
        ));
    }
    // A softmax over dims with triu / tril: its index ops see each row within its matrix
    // of the last two dims (cs_problem.k), which the operator's flat rows do not carry.
    if w.shapes().iter().any(|sh| w.tri_rows(sh) > 0) {
        return Err(Error::Usage(
            "export --torch does not take triu / tril over a softmax's dims yet (its operator \
             takes flat rows and sets no p.k, the rows of each matrix the index ops see); \
             `cutesmith export` without --torch writes the kernel and its C ABI"
                .into(),
        ));
    }
    if family == crate::spec::Family::GemmReduce {
        return Err(Error::Usage(format!(
            "export --torch does not take family {family} yet (its operator would return the \
             product's m x n, not one value a row); `cutesmith export` without --torch writes \
             the kernel and its C ABI"
        )));
    }
    if w.params().reduce.reads_targets() && family == crate::spec::Family::Reduce {
        return Err(Error::Usage(
            "export --torch does not take a cross entropy yet (its operator passes no int64 \
             targets); `cutesmith export` without --torch writes the kernel and its C ABI"
                .into(),
        ));
    }
    // A per-channel vector (a GroupNorm's or InstanceNorm's weight) is indexed by the
    // channel of each batch item's rows, which the operator's flat rows do not carry.
    let per_channel = w.chain().tensors.iter().any(|t| {
        matches!(t.kind, TensorKind::Channel(_))
            || (t.kind == TensorKind::Col
                && family == crate::spec::Family::Norm
                && w.shapes().iter().any(|s| s.batch > 1))
    });
    if family == crate::spec::Family::Norm && w.params().norm == crate::spec::NormKind::Batch {
        return Err(Error::Usage(
            "export --torch does not take a batch norm yet (its operator takes the input as \
             flat rows, not the batch's items); `cutesmith export` without --torch writes the \
             kernel and its C ABI"
                .into(),
        ));
    }
    if w.chain()
        .tensors
        .iter()
        .any(|t| matches!(t.kind, TensorKind::Broadcast(_)))
    {
        return Err(Error::Usage(
            "export --torch does not take a broadcast operand yet (its operator takes flat \
             rows and vectors, not the output's dims the operand spans); `cutesmith export` \
             without --torch writes the kernel and its C ABI"
                .into(),
        ));
    }
    if w.params().total != crate::spec::TotalKind::None {
        return Err(Error::Usage(
            "export --torch does not take a total yet (its operator sets no p.total and \
             returns one value a row); `cutesmith export` without --torch writes the kernel \
             and its C ABI"
                .into(),
        ));
    }
    if per_channel {
        return Err(Error::Usage(
            "export --torch does not take a norm with a per-channel weight or bias yet (its \
             operator takes the input as flat rows, without the channel of each); `cutesmith \
             export` without --torch writes the kernel and its C ABI"
                .into(),
        ));
    }
    if family == crate::spec::Family::GemmNorm {
        return Err(Error::Usage(format!(
            "export --torch does not take family {family} yet (its operator passes neither the \
             norm, its groups nor the ops before it); `cutesmith export` without --torch writes \
             the kernel and its C ABI"
        )));
    }
    let (b, mut written) = write_best(dir, abi_include, |w| package::csrc_dir(out, w), "")?;
    written.extend(package::write_package(
        &package::PackageInput {
            workload: &b.workload,
            kernel_file: &b.file,
            arch: &b.spec.arch,
            session: &b.spec.id,
            version: b.version,
            measured: &b.measured,
            cutlass_include,
        },
        out,
    )?);
    Ok(written)
}
