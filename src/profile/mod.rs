//! Feedback for the optimize and debug stages, from what costs no GPU time first: the
//! compile stage's ptxas report and SASS facts turned into concrete hints
//! ([`static_facts`]). Nsight Compute profiles and roofline placement join here.

pub mod ncu;
pub mod static_facts;
