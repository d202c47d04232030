/*
 * cutesmith kernel ABI, version 2.
 *
 * Every kernel cutesmith compiles (a built-in template instance, a model's reply, a
 * hand edit) is a shared object exporting the three entry points declared at the end of
 * this file. The harness (the `cutesmith worker` process) owns all device memory: it
 * fills a cs_problem with device pointers, leading dimensions, batch strides, scalars,
 * op parameters and a workspace of the size the kernel asked for, then calls
 * cutesmith_launch on its own stream. A kernel never allocates, frees or synchronizes
 * device memory itself, and never calls cuBLAS, cuBLASLt or cuDNN.
 *
 * This header is the single source of truth for the Rust side: src/abi/bindings.rs is
 * generated from it by bindgen (see tests/suite/abi.rs, which regenerates the bindings
 * and fails on any difference). Change the two together and bump CS_ABI_VERSION.
 *
 * Semantics by family (each operand stored as its layout field says; A is m x k, B is
 * k x n, C and D are m x n):
 *   CS_FAMILY_GEMM:          D[b] = chain(alpha * A[b] * B[b] + beta * C[b])
 *   CS_FAMILY_GEMM_BIAS_ACT: D[b] = act(alpha * A[b] * B[b] + beta * C[b] + bias (n)),
 *                            then the rest of the chain
 *   CS_FAMILY_ACTIVATION:    D = chain(A), elementwise over m rows of n elements
 *                            (lda, ldd); the activation is the chain's first op; with
 *                            view_rank > 0, A is read through a strided view (below)
 *   CS_FAMILY_SOFTMAX:       D = softmax over each of the m rows of A (n elements each)
 *   CS_FAMILY_LOG_SOFTMAX:   D = log_softmax over each row of A
 *   CS_FAMILY_GEMM_SOFTMAX:  D[b] = softmax (log_softmax when log_softmax != 0) over
 *                            each row of alpha * A[b] * B[b] + beta * C[b]
 *   CS_FAMILY_GEMM_GLU:      D[b] = gate(A[b] * B[b]) * (A[b] * B2[b]), gate a
 *                            cs_activation (SwiGLU: silu, GEGLU: gelu_tanh/gelu_erf);
 *                            B2 has B's layout, shape and dtype
 *   CS_FAMILY_NORM:          D[b] = chain(normalize(A[b])): each of the m rows of A (n
 *                            elements; layout_a ROW: a row is contiguous, COL: element j
 *                            of row i at j * lda + i) normalized by `norm` (cs_norm) with
 *                            `norm_eps`; D has A's layout (layout_cd == layout_a)
 *   CS_FAMILY_REDUCE:        D[b] = chain(reduce(A[b])): each of the m rows of A (k
 *                            elements; layout_a ROW: element j of row i at i * lda + j,
 *                            COL: at j * lda + i) reduced to one value by `reduce`
 *                            (cs_reduce); n == 1, D is m x 1 (ldd 1, batch_stride_d m)
 *   CS_FAMILY_GEMM_REDUCE:   D[b] = after(reduce(chain(alpha * A[b] * B[b]))): each row
 *                            of the m x n product (through the chain) reduced to one
 *                            value by `reduce`, then the kernel's own `cs_after` ops;
 *                            no C (beta 0), D is m x 1 (ldd 1, batch_stride_d m)
 *   CS_FAMILY_SCAN:          D[b] = chain(scan(A[b])): each of the m rows of A (n
 *                            elements; layout_a ROW: element j of row i at i * lda + j,
 *                            COL: at j * lda + i) scanned by `scan` (cs_scan) with
 *                            `scan_flags` (cs_scan_flag); D has A's layout and shape
 *   CS_FAMILY_GEMM_NORM:     D[b] = chain(normalize_g(before(alpha * A[b] * B[b] + beta *
 *                            C[b]))): each row of the m x n product, through the
 *                            kernel's own `cs_before` ops, split into `norm_groups`
 *                            groups of n / norm_groups adjacent elements (0 or 1: the
 *                            whole row), each group normalized by `norm` (cs_norm) with
 *                            `norm_eps`, then the chain (a GroupNorm's per-channel weight
 *                            and bias: `mul` / `add` a ROW operand); C and D row-major
 * C may be NULL when beta == 0. Batch strides are in elements; 0 broadcasts one
 * operand to every batch.
 *
 * The epilogue chain: an ordered list of elementwise ops applied in fp32 to the value
 * entering it (GEMM: alpha*acc + beta*C; activation: the element of A), written by
 * cutesmith as a C++ functor `cs_chain` from the workload spec and placed in the kernel
 * source (see cutesmith_chain.cuh). Ops may read up to CS_MAX_OPERANDS tensors, passed
 * in `operands`: a row vector (n values, indexed by the column), a column vector (m
 * values, indexed by the row) or a full m x n matrix (a residual).
 *
 * fp8 (E4M3, E5M2) operands are scaled per tensor: the math uses scale_a * A and
 * scale_b * B; an fp8 D stores the result times scale_d.
 */
#ifndef CUTESMITH_ABI_H
#define CUTESMITH_ABI_H

#include <stdint.h>

#define CS_ABI_VERSION 3

#ifdef __CUDACC__
#include <cuda_runtime_api.h>
typedef cudaStream_t cs_stream_t;
#else
/* The same type the CUDA runtime calls cudaStream_t, without its headers. */
typedef struct CUstream_st *cs_stream_t;
#endif

#ifdef __cplusplus
#define CS_EXTERN_C extern "C"
#else
#define CS_EXTERN_C
#endif
#define CS_EXPORT CS_EXTERN_C __attribute__((visibility("default")))

/* Which computation a kernel performs. */
typedef enum cs_family {
  CS_FAMILY_GEMM = 0,
  CS_FAMILY_GEMM_BIAS_ACT = 1,
  CS_FAMILY_ACTIVATION = 2,
  CS_FAMILY_SOFTMAX = 3,
  CS_FAMILY_LOG_SOFTMAX = 4,
  CS_FAMILY_GEMM_SOFTMAX = 5,
  CS_FAMILY_GEMM_GLU = 6,
  CS_FAMILY_NORM = 7,
  CS_FAMILY_REDUCE = 8,
  CS_FAMILY_GEMM_REDUCE = 9,
  CS_FAMILY_SCAN = 10,
  CS_FAMILY_GEMM_NORM = 11
} cs_family;

/* Element types of operands and results. */
typedef enum cs_dtype {
  CS_DTYPE_F32 = 0,
  CS_DTYPE_F16 = 1,
  CS_DTYPE_BF16 = 2,
  CS_DTYPE_F64 = 3,
  CS_DTYPE_E4M3 = 4, /* fp8: 4 exponent bits, 3 mantissa bits, no infinity */
  CS_DTYPE_E5M2 = 5, /* fp8: 5 exponent bits, 2 mantissa bits */
  CS_DTYPE_I64 = 6,  /* int64_t: the index an argmax / argmin writes */
  CS_DTYPE_BOOL = 7  /* one byte, 0 false and any other value true (read as 0 or 1): a
                        chain's tensor operand only (a mask) */
} cs_dtype;

/* Storage order of a matrix operand: ROW means the second index is contiguous. */
typedef enum cs_layout {
  CS_LAYOUT_ROW = 0,
  CS_LAYOUT_COL = 1
} cs_layout;

/* Elementwise function for CS_FAMILY_ACTIVATION and CS_FAMILY_GEMM_BIAS_ACT. */
typedef enum cs_activation {
  CS_ACT_IDENTITY = 0,
  CS_ACT_RELU = 1,
  CS_ACT_LEAKY_RELU = 2, /* slope in act_alpha */
  CS_ACT_GELU_ERF = 3,
  CS_ACT_GELU_TANH = 4,
  CS_ACT_SILU = 5,
  CS_ACT_SIGMOID = 6,
  CS_ACT_TANH = 7,
  CS_ACT_SELU = 8,
  CS_ACT_ELU = 9,         /* alpha in act_alpha */
  CS_ACT_HARDSIGMOID = 10,
  CS_ACT_HARDSWISH = 11,
  CS_ACT_HARDTANH = 12,   /* min in act_alpha, max in act_beta */
  CS_ACT_SOFTPLUS = 13,   /* beta in act_alpha, threshold in act_beta */
  CS_ACT_SOFTSIGN = 14,
  CS_ACT_MISH = 15
} cs_activation;

/* The row normalization of CS_FAMILY_NORM (x is one row of n elements, eps = norm_eps):
 *   RMS:   x * rsqrt(mean(x^2) + eps)                    (RMSNorm)
 *   LAYER: (x - mean(x)) * rsqrt(var(x) + eps), var the biased (population) variance
 *   L2:    x / max(sqrt(sum(x^2)), eps)                   (F.normalize, p = 2)
 *   L1:    x / max(sum(|x|), eps)                         (F.normalize, p = 1)
 *   BATCH: LAYER's formula over each column of a batch item's m rows instead of each row
 *          (BatchNorm's training-mode statistics; CS_FAMILY_GEMM_NORM only)
 * An affine weight and bias (LayerNorm, RMSNorm) are the chain's `mul row` / `add row`. */
typedef enum cs_norm {
  CS_NORM_RMS = 0,
  CS_NORM_LAYER = 1,
  CS_NORM_L2 = 2,
  CS_NORM_L1 = 3,
  CS_NORM_BATCH = 4
} cs_norm;

/* The reduction of CS_FAMILY_REDUCE (x is one row of k elements):
 *   SUM: sum(x)   MEAN: sum(x) / k   MAX: max(x)   MIN: min(x) (a NaN in x gives NaN)
 *   LOGSUMEXP: max(x) + log(sum(exp(x - max(x))))   L2: sqrt(sum(x^2)) (torch.norm)
 *   ARGMAX / ARGMIN: the index (from 0) of the first largest / smallest x, or of the first
 *   NaN if any (torch.argmax / argmin); D is int64 (CS_DTYPE_I64), no chain
 *   CROSS_ENTROPY: logsumexp(x) - x[t], t = targets[b * m + i] the row's class (int64); a
 *   row whose t is ignore_index gives 0 and is left out of a mean (torch's cross_entropy
 *   over rows of logits); rows row-major, no chain; `total` says what D holds */
typedef enum cs_reduce {
  CS_REDUCE_SUM = 0,
  CS_REDUCE_MEAN = 1,
  CS_REDUCE_MAX = 2,
  CS_REDUCE_MIN = 3,
  CS_REDUCE_LOGSUMEXP = 4,
  CS_REDUCE_L2 = 5,
  CS_REDUCE_ARGMAX = 6,
  CS_REDUCE_ARGMIN = 7,
  CS_REDUCE_CROSS_ENTROPY = 8
} cs_reduce;

/* What D holds of CS_FAMILY_REDUCE's row values (CS_REDUCE_CROSS_ENTROPY only):
 *   NONE: each row's value, D m x 1 a batch (torch's reduction='none')
 *   SUM:  one value a batch, the sum of its rows' values (D[b], batch_stride_d 1)
 *   MEAN: one value a batch, that sum over the rows counted (rows whose target is not
 *         ignore_index; none counted: 0 / 0, NaN, as torch) */
typedef enum cs_total {
  CS_TOTAL_NONE = 0,
  CS_TOTAL_SUM = 1,
  CS_TOTAL_MEAN = 2
} cs_total;

/* The scan of CS_FAMILY_SCAN along a row x_0 .. x_{n-1}:
 *   SUM: y_j = x_0 + ... + x_j (torch.cumsum)   PROD: y_j = x_0 * ... * x_j (torch.cumprod)
 * scan_flags, a bitwise or of cs_scan_flag: REVERSE scans from the row's end (y_j over
 * x_j .. x_{n-1}); EXCLUSIVE leaves x_j out of y_j (the first y is 0, or 1 for PROD). */
typedef enum cs_scan {
  CS_SCAN_SUM = 0,
  CS_SCAN_PROD = 1
} cs_scan;

typedef enum cs_scan_flag {
  CS_SCAN_REVERSE = 1,
  CS_SCAN_EXCLUSIVE = 2
} cs_scan_flag;

/* Where an epilogue-chain tensor operand is indexed from. */
typedef enum cs_operand_kind {
  CS_OPERAND_NONE = 0,
  CS_OPERAND_ROW = 1,    /* n values: element j of a row vector, for column j of D */
  CS_OPERAND_COL = 2,    /* m values: element i of a column vector, for row i of D */
  CS_OPERAND_MATRIX = 3, /* m x n values (layout_cd, ld, batch_stride): a residual */
  CS_OPERAND_CHANNEL = 4, /* m * ld values, ld channels a row: element (i, j) of D reads
                           * i * ld + j / (n / ld) (n a multiple of ld); a GroupNorm's
                           * per-channel weight, its rows groups of ld channels */
  CS_OPERAND_BROADCAST = 5 /* a tensor broadcast over some of the output's dims (a
                            * [1, C, 1, 1] bias of an [N, C, H, W] output): element (i, j)
                            * of D (row-major) reads
                            *   sum_t ((i / row_div[t]) % row_mod[t]) * row_stride[t] + j * ld
                            * (ld 1 when it spans the last dim, else 0; unused terms are
                            * div 1, mod 1, stride 0) */
} cs_operand_kind;

#define CS_MAX_OPERANDS 4

/* The most dims a view of A has (CS_FAMILY_ACTIVATION's view_rank). */
#define CS_MAX_VIEW_DIMS 6

/* One tensor operand of the epilogue chain. */
typedef struct cs_operand {
  const void *ptr;
  int32_t kind;          /* cs_operand_kind */
  int32_t dtype;         /* cs_dtype */
  int64_t ld;            /* matrix: leading dimension in elements; channel: channels a
                          * row; row and col vectors: 1; broadcast: the column's stride
                          * (1 or 0) */
  int64_t batch_stride;  /* elements between batches (0: shared by every batch) */
  int64_t row_div[2];    /* broadcast only: the row index terms (see CS_OPERAND_BROADCAST) */
  int64_t row_mod[2];
  int64_t row_stride[2];
} cs_operand;

/* Return codes of the entry points other than CUDA's own (cudaError_t values). */
typedef enum cs_status {
  CS_OK = 0,
  /* The kernel does not handle this problem (shape, layout, dtype, alignment). */
  CS_ERR_UNSUPPORTED = 100001,
  /* The workspace given is smaller than cutesmith_workspace_bytes asked for. */
  CS_ERR_WORKSPACE = 100002,
  /* The problem's abi_version is not the one the kernel was built for. */
  CS_ERR_ABI_VERSION = 100003
} cs_status;

/* One problem instance: everything a launch needs, owned by the harness. */
typedef struct cs_problem {
  uint32_t abi_version; /* CS_ABI_VERSION */
  int32_t family;       /* cs_family */

  /* Dimensions: GEMM m x n x k over `batch` independent problems; activation and
   * softmax use m rows of n elements and leave k = 0, batch = 1 (a softmax of dims: k is
   * the rows of each matrix of the last two dims, which index ops (triu, tril) see). */
  int64_t m;
  int64_t n;
  int64_t k;
  int64_t batch;

  /* Element types: A and B operands, C and D (C is read, D written), accumulation. */
  int32_t dtype_ab;
  int32_t dtype_cd;
  int32_t dtype_acc;

  /* Storage order of A, B, C and D (cs_layout). */
  int32_t layout_a;
  int32_t layout_b;
  int32_t layout_cd;

  /* Device pointers. c and bias may be NULL when unused. */
  const void *a;
  const void *b;
  const void *c;
  void *d;
  const void *bias;

  /* Leading dimensions in elements (distance between rows of a row-major operand,
   * between columns of a column-major one). */
  int64_t lda;
  int64_t ldb;
  int64_t ldc;
  int64_t ldd;

  /* Batch strides in elements (0 broadcasts one operand to every batch). */
  int64_t batch_stride_a;
  int64_t batch_stride_b;
  int64_t batch_stride_c;
  int64_t batch_stride_d;

  /* Scalars of the GEMM epilogue. */
  float alpha;
  float beta;

  /* Op parameters: the activation (cs_activation) and its scalar (leaky slope). */
  int32_t activation;
  float act_alpha;

  /* Scratch memory provided by the harness: zeroed once when allocated, kept between
   * launches. A kernel that keeps counters there resets them itself (a
   * cudaMemsetAsync on the given stream is allowed). */
  void *workspace;
  uint64_t workspace_bytes;

  /* Device facts the harness read, so a kernel can size a persistent grid. */
  int32_t sm_count;
  int32_t reserved0;

  /* ---- ABI version 2 ---- */

  /* The epilogue chain's tensor operands, in the order the chain names them. */
  cs_operand operands[CS_MAX_OPERANDS];
  int32_t num_operands;

  /* Second parameter of the activation (hardtanh max, softplus threshold). */
  float act_beta;

  /* fp8 per-tensor scales (1 for other types). */
  float scale_a;
  float scale_b;
  float scale_d;

  /* CS_FAMILY_GEMM_SOFTMAX: nonzero for log_softmax. */
  int32_t log_softmax;

  /* CS_FAMILY_GEMM_GLU: the second weight (B's layout, shape and dtype) and the gate. */
  const void *b2;
  int64_t ldb2;
  int64_t batch_stride_b2;
  int32_t gate; /* cs_activation */
  int32_t reserved1;

  /* CS_FAMILY_NORM: the normalization (cs_norm) and its epsilon. Appended to version 2:
   * a kernel of another family never reads them. */
  int32_t norm;
  float norm_eps;

  /* CS_FAMILY_REDUCE: the reduction (cs_reduce). Appended to version 2 likewise. */
  int32_t reduce;
  /* CS_FAMILY_GEMM_NORM: the groups each row is normalized in (0 or 1: the whole row);
   * it divides n. A reserved field of version 2 before, always written 0. */
  int32_t norm_groups;

  /* CS_FAMILY_SCAN: the scan (cs_scan) and its flags (cs_scan_flag bits). Appended to
   * version 2 likewise. */
  int32_t scan;
  int32_t scan_flags;

  /* CS_REDUCE_CROSS_ENTROPY: the rows' target classes (int64, m a batch, batch stride m),
   * the target that marks a row left out, and what D holds (cs_total). Appended to version
   * 2 likewise. */
  const int64_t *targets;
  int64_t ignore_index;
  int32_t total;
  int32_t reserved2;

  /* CS_FAMILY_ACTIVATION: A read through a view (torch's as_strided: a permute, a
   * transpose, a split or select of a packed tensor). With view_rank > 0, D is m x n
   * row-major with ldd == n, and its elements in row-major order are those of the view's
   * dims view_extent[0 .. view_rank) (outermost first; their product is m * n): the
   * element at coordinates (c_0, ..., c_{rank-1}) is
   *   chain(A[view_offset + c_0 * view_stride[0] + ... + c_{rank-1} * view_stride[rank-1]])
   * at row i, column j of D (its row-major position i * n + j), so the chain's operands
   * are indexed as D's; lda and batch_stride_a are unused. A holds every element the
   * view reaches (the harness's view never leaves A). view_rank 0: A is shaped like D.
   * Appended to version 3 likewise: a kernel of another family never reads them. */
  int32_t view_rank;
  int32_t reserved3;
  int64_t view_offset;
  int64_t view_extent[CS_MAX_VIEW_DIMS];
  int64_t view_stride[CS_MAX_VIEW_DIMS];
} cs_problem;

/* The ABI version this shared object was compiled against (CS_ABI_VERSION). */
CS_EXPORT uint32_t cutesmith_abi_version(void);

/* Bytes of workspace the launch of `problem` needs, written to *bytes.
 * Returns CS_OK or CS_ERR_UNSUPPORTED. Pointers in `problem` may be NULL here. */
CS_EXPORT int32_t cutesmith_workspace_bytes(const cs_problem *problem, uint64_t *bytes);

/* Enqueue the computation on `stream` and return without synchronizing.
 * Returns CS_OK, a cs_status, or the cudaError_t of a failed launch. */
CS_EXPORT int32_t cutesmith_launch(const cs_problem *problem, cs_stream_t stream);

#endif /* CUTESMITH_ABI_H */
