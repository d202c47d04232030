//! Feedback for the optimize and debug stages: the compile stage's ptxas report and SASS
//! facts turned into concrete hints ([`static_facts`]), Nsight Compute profiles
//! ([`ncu`]), the roofline placement ([`roofline`]), and the selection of the few
//! findings a prompt should carry ([`guidance`]); `cutesmith profile` ([`command`]).

pub mod guidance;
pub mod ncu;
pub mod roofline;
pub mod static_facts;
