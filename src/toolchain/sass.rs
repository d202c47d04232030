//! SASS facts from `cuobjdump -sass`: counts of the instructions that tell whether a
//! kernel uses the fast paths (HGMMA, TMA, 128-bit loads) or spills.
//!
//! A kernel's section starts at `Function : <mangled>`; its instructions look like
//! `/*0070*/  @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;` followed by an encoding comment line
//! (`/* 0x000fe2... */`), which is not an instruction. The opcode is the first word after
//! an optional predicate; its dot-separated modifiers give the width (`.128`). Pure text
//! processing: nothing here spawns a process.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// Instruction counts of one kernel (static counts in the binary, not executed counts):
/// enough to tell a tensor-core, TMA-fed, non-spilling kernel from a slow one.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KernelSass {
    /// The mangled symbol from `Function :` (joins with `KernelResources::mangled`);
    /// `"total"` for [`SassSummary::totals`].
    pub name: String,
    /// Every instruction, NOPs included.
    pub instructions: u64,
    /// Hopper warpgroup MMA (`HGMMA.64x128x16.F32.BF16 ...`; fp8 `QGMMA.64x128x32.F32.E4M3.E4M3`
    /// and integer `IGMMA` counted too).
    pub hgmma: u64,
    /// Warp-level tensor-core MMA (Ampere-style `HMMA.16816`).
    pub hmma: u64,
    pub ffma: u64,
    /// TMA loads (`UTMALDG.2D` ...).
    pub utmaldg: u64,
    /// TMA stores.
    pub utmastg: u64,
    /// `cp.async` global-to-shared copies.
    pub ldgsts: u64,
    /// Global loads of 128 bits or more.
    pub ldg_128: u64,
    /// Global loads narrower than 128 bits.
    pub ldg: u64,
    /// Global stores of 128 bits or more.
    pub stg_128: u64,
    /// Global stores narrower than 128 bits.
    pub stg: u64,
    pub lds: u64,
    /// `ldmatrix`.
    pub ldsm: u64,
    pub sts: u64,
    /// Local-memory loads: spills (or a stack array) being read back.
    pub ldl: u64,
    /// Local-memory stores: spills.
    pub stl: u64,
    /// CTA barriers (`BAR.SYNC`, `BAR.ARV`, ...), not memory or warpgroup barriers.
    pub bar: u64,
}

impl KernelSass {
    fn add(&mut self, o: &KernelSass) {
        self.instructions += o.instructions;
        self.hgmma += o.hgmma;
        self.hmma += o.hmma;
        self.ffma += o.ffma;
        self.utmaldg += o.utmaldg;
        self.utmastg += o.utmastg;
        self.ldgsts += o.ldgsts;
        self.ldg_128 += o.ldg_128;
        self.ldg += o.ldg;
        self.stg_128 += o.stg_128;
        self.stg += o.stg;
        self.lds += o.lds;
        self.ldsm += o.ldsm;
        self.sts += o.sts;
        self.ldl += o.ldl;
        self.stl += o.stl;
        self.bar += o.bar;
    }

    /// Counts one instruction given its opcode (`LDG`) and modifiers (`E.128.CONSTANT`).
    fn count(&mut self, opcode: &str, modifiers: &str) {
        self.instructions += 1;
        let wide = modifiers.split('.').any(|m| m == "128" || m == "256");
        match opcode {
            "HGMMA" | "QGMMA" | "IGMMA" => self.hgmma += 1,
            "HMMA" => self.hmma += 1,
            "FFMA" => self.ffma += 1,
            "UTMALDG" => self.utmaldg += 1,
            "UTMASTG" => self.utmastg += 1,
            "LDGSTS" => self.ldgsts += 1,
            "LDG" if wide => self.ldg_128 += 1,
            "LDG" => self.ldg += 1,
            "STG" if wide => self.stg_128 += 1,
            "STG" => self.stg += 1,
            "LDS" => self.lds += 1,
            "LDSM" => self.ldsm += 1,
            "STS" => self.sts += 1,
            "LDL" => self.ldl += 1,
            "STL" => self.stl += 1,
            "BAR" => self.bar += 1,
            _ => {}
        }
    }

    /// One line for a report, e.g.
    /// `HGMMA 128, UTMALDG 8, LDGSTS 0, LDG.128 0, spills (LDL/STL) 0/0, 1432 instructions`.
    pub fn summary_line(&self) -> String {
        format!(
            "HGMMA {}, UTMALDG {}, LDGSTS {}, LDG.128 {}, spills (LDL/STL) {}/{}, {} instructions",
            self.hgmma,
            self.utmaldg,
            self.ldgsts,
            self.ldg_128,
            self.ldl,
            self.stl,
            self.instructions
        )
    }
}

/// Every kernel of one disassembly, in the order cuobjdump printed them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SassSummary {
    pub kernels: Vec<KernelSass>,
}

impl SassSummary {
    /// All kernels summed, named `"total"`: what a report shows for a shared object.
    pub fn totals(&self) -> KernelSass {
        let mut t = KernelSass {
            name: "total".into(),
            ..KernelSass::default()
        };
        for k in &self.kernels {
            t.add(k);
        }
        t
    }

    /// [`KernelSass::summary_line`] of the totals.
    pub fn summary_line(&self) -> String {
        self.totals().summary_line()
    }
}

static FUNCTION: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\s*Function\s*:\s*(\S+)").ok());
static INSTRUCTION: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Za-z0-9_]+)*)",
    )
    .ok()
});

/// Parses `cuobjdump -sass` output. Instructions before the first `Function :` line
/// belong to no kernel and are ignored.
pub fn parse(cuobjdump_sass_output: &str) -> SassSummary {
    let (Some(function), Some(instruction)) = (FUNCTION.as_ref(), INSTRUCTION.as_ref()) else {
        return SassSummary::default();
    };
    let mut kernels: Vec<KernelSass> = Vec::new();
    for line in cuobjdump_sass_output.lines() {
        if let Some(c) = function.captures(line) {
            kernels.push(KernelSass {
                name: c[1].to_string(),
                ..KernelSass::default()
            });
        } else if let (Some(c), Some(k)) = (instruction.captures(line), kernels.last_mut()) {
            let modifiers = c.get(2).map_or("", |m| m.as_str());
            k.count(&c[1], modifiers.trim_start_matches('.'));
        }
    }
    SassSummary { kernels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_wgmma_tma_kernel() {
        let s = parse(parser_fixture!("wgmma_tma_small.sass"));
        assert_eq!(s.kernels.len(), 2);
        assert_eq!(
            s.kernels[0].name,
            "_ZN3cub17CUB_300001_SM_9006detail11EmptyKernelIvEEvv"
        );
        assert_eq!(s.kernels[0].instructions, 16);
        let g = &s.kernels[1];
        assert!(g.name.starts_with("_Z11gemm_deviceIN4cute5tupleIJiiiEEE"));
        assert_eq!(g.hgmma, 4);
        assert_eq!(g.utmaldg, 6);
        assert_eq!((g.utmastg, g.ldgsts, g.ldg_128, g.stg_128), (0, 0, 0, 0));
        assert_eq!((g.ldg, g.stg), (32, 64));
        assert_eq!((g.ldl, g.stl, g.bar), (0, 0, 1));
        assert_eq!(g.instructions, 528);
        let t = s.totals();
        assert_eq!(t.name, "total");
        assert_eq!(t.instructions, 544);
        assert_eq!(
            s.summary_line(),
            "HGMMA 4, UTMALDG 6, LDGSTS 0, LDG.128 0, spills (LDL/STL) 0/0, 544 instructions"
        );
    }

    #[test]
    fn plain_kernels_wide_loads_and_spills() {
        let s = parse(parser_fixture!("plain_kernels.sass"));
        let names: Vec<&str> = s.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "_Z6spillyILi40EEvPKfPfi",
                "_Z9with_smemPKfPf",
                "_Z8vec_copyPK6float4PS_i"
            ]
        );
        let [spilly, smem, copy] = &s.kernels[..] else {
            panic!("three kernels");
        };
        assert_eq!((spilly.ldl, spilly.stl), (106, 107));
        assert_eq!((spilly.ldg, spilly.ffma, spilly.hgmma), (71, 228, 0));
        assert_eq!(spilly.instructions, 616);
        assert_eq!((smem.lds, smem.sts, smem.bar, smem.stg), (1, 1, 1, 1));
        assert_eq!(
            (copy.ldg_128, copy.stg_128, copy.ldg, copy.stg),
            (1, 1, 0, 0)
        );
        assert_eq!(s.totals().instructions, 680);
        assert_eq!(s.totals().stg, 2);
        assert_eq!(
            s.summary_line(),
            "HGMMA 0, UTMALDG 0, LDGSTS 0, LDG.128 1, spills (LDL/STL) 106/107, 680 instructions"
        );
    }

    #[test]
    fn predicates_and_opcode_boundaries() {
        let text = "\t\tFunction : k\n\
            /*0000*/ @!PT LDS.U.128 R4, [R2] ;\n\
            /* 0x000fe20000000800 */\n\
            /*0010*/ @P0 LDSM.16.M88.4 R8, [R3] ;\n\
            /*0020*/ @!UP1 BAR.SYNC.DEFER_BLOCKING 0x0 ;\n\
            /*0030*/ MEMBAR.ALL.CTA ;\n\
            /*0040*/ LDGSTS.E.BYPASS.LTC128B.128 [R1], desc[UR4][R2.64] ;\n\
            /*0050*/ HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;\n\
            /*0060*/ UTMASTG.2D [UR4], [UR6] ;\n\
            /*0070*/ STG.E.ENL2.256 desc[UR4][R2.64], R4, R8 ;\n";
        let k = &parse(text).kernels[0];
        assert_eq!(k.instructions, 8);
        assert_eq!((k.lds, k.ldsm, k.bar, k.ldgsts, k.ldg_128), (1, 1, 1, 1, 0));
        assert_eq!((k.hgmma, k.utmastg, k.stg_128), (1, 1, 1));
        assert!(parse("no sass here").kernels.is_empty());
    }

    /// The Hopper GEMM fixture of `tests/fixtures/nvcc` (a real CuTe Hopper GEMM).
    #[test]
    fn hopper_gemm_fixture() {
        let text = include_str!("../../tests/fixtures/nvcc/gemm_ok.sass");
        let t = parse(text).totals();
        assert!(t.hgmma > 0, "{}", t.summary_line());
        assert!(t.utmaldg > 0, "{}", t.summary_line());
    }
}
