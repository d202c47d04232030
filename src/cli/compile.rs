//! `cutesmith compile FILE.cu...`: kernels compiled (in parallel) to shared objects, with
//! the resource report and SASS summary, or the condensed diagnostics and the line to fix.

use super::{ensure_toolchain, to_json, CompileArgs, EXIT_GOAL_NOT_MET, EXIT_OK};
use crate::error::Result;
use crate::toolchain::cache::CompileCache;
use crate::toolchain::compile::{self, CompileOptions, CompileRequest};
use crate::toolchain::ToolchainOptions;

pub fn cmd_compile(opts: &ToolchainOptions, no_install: bool, args: CompileArgs) -> Result<i32> {
    let tc = ensure_toolchain(opts, no_install)?;
    let options = CompileOptions {
        arch: args.arch.clone(),
        defines: args.defines.clone(),
        extra_flags: args.nvcc_flags.clone(),
        timeout_secs: args.timeout,
        use_cache: !args.no_cache,
        sass: true,
    };
    let requests = args
        .files
        .iter()
        .map(|f| CompileRequest::from_file(f, options.clone()))
        .collect::<Result<Vec<_>>>()?;
    let cache = CompileCache::default_location();
    let jobs = args.jobs.unwrap_or_else(compile::default_jobs);
    if requests.len() > 1 {
        eprintln!("compiling {} files, {jobs} at a time", requests.len());
    } else {
        eprintln!(
            "compiling {} with nvcc {} ...",
            args.files[0].display(),
            tc.nvcc.version
        );
    }
    let start = std::time::Instant::now();
    let results = compile::compile_many(&tc, &cache, &requests, jobs, &|i, r| {
        if requests.len() > 1 {
            let what = match r {
                Ok(o) if o.ok() => "ok",
                Ok(_) => "FAILED",
                Err(_) => "ERROR",
            };
            eprintln!("  {}: {what}", args.files[i].display());
        }
    });
    let mut code = EXIT_OK;
    for (file, result) in args.files.iter().zip(results) {
        let outcome = result?;
        if args.json {
            println!("{}", to_json(&outcome)?);
        } else {
            print!("{}", outcome.render(&file.display().to_string()));
        }
        if !outcome.ok() {
            code = EXIT_GOAL_NOT_MET;
        }
    }
    eprintln!("done in {:.2} s", start.elapsed().as_secs_f64());
    Ok(code)
}
