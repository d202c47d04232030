//! The ptxas resource report (`-Xptxas -v`): registers, shared memory, stack and spills
//! per kernel.
