//! nvcc diagnostics: parsing compiler output into (file, line, severity, message) and
//! condensing CuTe template backtraces to what a person or a model needs.
